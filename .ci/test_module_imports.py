#!/usr/bin/env python3
"""Tests of .ci/module_imports.py on small crates it builds: it must find a circle of three
files (the kind that grew in launch unseen while the checker compared pairs only), a pair, and
none where imports only go one way."""
import os, subprocess, sys, tempfile, unittest

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_imports.py")


def check(files):
    """Runs the checker on a workspace with one crate made of `files` (name -> source)."""
    with tempfile.TemporaryDirectory() as root:
        src = os.path.join(root, "crates", "demo", "src")
        for name, text in files.items():
            path = os.path.join(src, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        p = subprocess.run([sys.executable, CHECKER, root], capture_output=True, text=True)
        return p.returncode, p.stdout


LIB = "mod a;\nmod b;\nmod c;\n"


class Circles(unittest.TestCase):
    def test_three_file_circle(self):
        code, out = check({
            "lib.rs": LIB,
            "a.rs": "use crate::b::B;\n",
            "b.rs": "use crate::c::C;\n",
            "c.rs": "use crate::a::A;\n",
        })
        self.assertEqual(code, 1, out)
        self.assertIn("import circles: a -> b -> c -> a", out)

    def test_pair_and_super_and_use_groups(self):
        code, out = check({
            "lib.rs": LIB,
            "a.rs": "use super::b;\n",
            "b/mod.rs": "use crate::{c::C, a::{self, A}};\n",
            "c.rs": "",
        })
        self.assertEqual(code, 1, out)
        self.assertIn("a -> b -> a", out)

    def test_one_way_imports_pass(self):
        code, out = check({
            "lib.rs": LIB,
            "a.rs": "use crate::b::B;\nuse crate::c::C;\n",
            "b.rs": "use crate::c::C;\n// use crate::a::A;  (a comment is not an import)\n",
            "c.rs": "",
        })
        self.assertEqual(code, 0, out)
        self.assertIn("import circles: none", out)


if __name__ == "__main__":
    unittest.main()
