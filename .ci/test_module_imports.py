#!/usr/bin/env python3
"""Tests of .ci/module_imports.py on small trees it builds in temporary folders: it must find a
circle of three files (the kind that grew in launch unseen while the checker compared pairs
only), a pair, a folder's mod.rs and its child, a Python pair, and none where imports only go
one way (a parent using its child, a child using an item defined elsewhere, test modules)."""
import os, subprocess, sys, tempfile, unittest

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_imports.py")


def run(files, *flags):
    """Runs the checker on a workspace made of `files` (path -> source)."""
    with tempfile.TemporaryDirectory() as root:
        for name, text in files.items():
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        p = subprocess.run([sys.executable, CHECKER, root, *flags], capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr


def check(files, *flags):
    """Runs the checker on a workspace with one crate made of `files` (name -> source)."""
    return run({os.path.join("crates", "demo", "src", n): t for n, t in files.items()}, *flags)


def check_py(files, *flags):
    """Runs the checker on a workspace with one Python package `pkg` made of `files`."""
    return run({os.path.join("python", "pkg", n): t for n, t in files.items()}, *flags)


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
            "a.rs": "use super::b::B;\npub struct A;\n",
            "b/mod.rs": "use crate::{c::C, a::{self, A}};\npub struct B;\n",
            "c.rs": "pub struct C;\n",
        })
        self.assertEqual(code, 1, out)
        self.assertIn("import circles: a -> b/mod -> a", out)

    def test_mod_rs_and_its_child(self):
        # The planted pair of a folder: mod.rs calls its child, the child uses what mod.rs
        # itself defines (Shared) through super::.
        code, out = check({
            "lib.rs": "mod error;\nmod server;\npub use error::Error;\n",
            "error.rs": "pub struct Error;\n",
            "server/mod.rs": "mod connection;\nmod wire;\npub struct Shared;\n"
                             "fn accept(s: &Shared) { connection::serve(s) }\n",
            "server/connection.rs": "use super::Shared;\nuse crate::Error;\n"
                                    "pub(super) fn serve(_: &Shared) {}\n",
            "server/wire.rs": "pub fn frame() {}\n",
        }, "-l")
        self.assertEqual(code, 1, out)
        self.assertIn("import circles: server/connection -> server/mod -> server/connection", out)
        # each edge with the line that makes it; crate::Error is error.rs's, not lib.rs's
        self.assertIn("server/connection -> error (server/connection.rs:2), "
                      "server/mod (server/connection.rs:1)", out)
        self.assertIn("server/mod -> server/connection (server/mod.rs:4)", out)

    def test_three_files_across_folders_super_super_and_self(self):
        code, out = check({
            "lib.rs": "mod x;\nmod y;\n",
            "x/mod.rs": "mod inner;\n",
            "x/inner/mod.rs": "mod deep;\n",
            "x/inner/deep.rs": "use super::super::super::y::Y;\npub struct D;\n",
            "y.rs": "pub struct Y;\npub fn f() { self::g(); crate::x::inner::deep::D; }\nfn g() {}\n",
        })
        self.assertEqual(code, 1, out)
        self.assertIn("import circles: x/inner/deep -> y -> x/inner/deep", out)

    def test_reexports_followed_to_the_definer(self):
        # lib.rs re-exports a::Thing, which a/mod.rs re-exports from a/b.rs: c's crate::Thing
        # is an edge to a/b, and b using c closes a circle b -> c -> b (not through lib or a).
        code, out = check({
            "lib.rs": "mod a;\nmod c;\npub use a::Thing;\n",
            "a/mod.rs": "mod b;\npub use self::b::Thing;\n",
            "a/b.rs": "pub struct Thing;\nfn f() { crate::c::helper() }\n",
            "c.rs": "use crate::Thing;\npub fn helper() {}\n",
        })
        self.assertEqual(code, 1, out)
        self.assertIn("import circles: a/b -> c -> a/b", out)

    def test_names_a_macro_makes_charged_where_the_macro_runs(self):
        # env.rs re-exports vars.rs by glob; vars! makes RANK there. fallback.rs's super::RANK
        # is vars.rs's (no circle with env.rs, which uses fallback); lib.rs's PhalanxError,
        # made by a macro in lib.rs itself, is lib.rs's (a circle with group.rs).
        code, out = check({
            "lib.rs": "mod env;\nmod group;\npyo3::create_exception!(m, PhalanxError, E);\n"
                      "fn f() { group::Group; }\n",
            "group.rs": "use crate::PhalanxError;\npub struct Group;\n",
            "env.rs": "mod fallback;\nmod vars;\npub use vars::*;\n"
                      "pub fn level() { fallback::level() }\n",
            "env/vars.rs": "macro_rules! vars { ($($id:ident),*) => { $(pub const $id: u8 = 0;)* } }\n"
                           "vars! { RANK, WORLD_SIZE }\n",
            "env/fallback.rs": "use super::{RANK, WORLD_SIZE};\npub fn level() {}\n",
        }, "-l")
        self.assertEqual(code, 1, out)
        self.assertIn("import circles: group -> lib -> group\n", out)
        self.assertIn("env/fallback -> env/vars (env/fallback.rs:1)", out)

    def test_python_pair(self):
        code, out = check_py({
            "__init__.py": "from ._work import Work\n",
            "_work.py": "from ._shims import noted\nclass Work: pass\n",
            "_shims.py": "def noted(w): pass\n"
                         "def behind(h):\n    from ._work import Work\n    return Work\n",
        })
        self.assertEqual(code, 1, out)
        self.assertIn("## python/pkg: 3 modules; import circles: _shims -> _work -> _shims", out)

    def test_python_three_modules_absolute_and_subpackage(self):
        code, out = check_py({
            "__init__.py": "",
            "_a.py": "import pkg._b\n",
            "_b.py": "from pkg.sub import c\n",
            "sub/__init__.py": "",
            "sub/c.py": "def f():\n    from .. import _a\n",
        })
        self.assertEqual(code, 1, out)
        self.assertIn("import circles: _a -> _b -> sub/c -> _a", out)

    def test_native_crate_under_python_src(self):
        code, out = run({
            "python/src/lib.rs": "mod group;\npub struct PhalanxError;\nfn m() { group::Group; }\n",
            "python/src/group.rs": "use crate::PhalanxError;\npub struct Group;\n",
        })
        self.assertEqual(code, 1, out)
        self.assertIn("## python/src: 2 modules; import circles: group -> lib -> group", out)


class NoCircles(unittest.TestCase):
    def test_one_way_imports_pass(self):
        code, out = check({
            "lib.rs": LIB,
            "a.rs": "use crate::b::B;\nuse crate::c::C;\n",
            "b.rs": "use crate::c::C;\n// use crate::a::A;  (a comment is not an import)\n"
                    "const S: &str = \"crate::a::A\";\n/* crate::a::A */\n",
            "c.rs": "",
        })
        self.assertEqual(code, 0, out)
        self.assertIn("import circles: none", out)

    def test_parent_uses_child_only(self):
        code, out = check({
            "lib.rs": "mod store;\npub use store::Store;\n",
            "store/mod.rs": "mod tcp;\npub use tcp::TcpStore;\npub struct Store;\n"
                            "fn open() { tcp::connect(); let _ = self::tcp::TcpStore; }\n",
            "store/tcp.rs": "pub struct TcpStore;\npub fn connect() {}\n",
        })
        self.assertEqual(code, 0, out)
        self.assertIn("import circles: none", out)

    def test_child_uses_a_crate_item_defined_elsewhere(self):
        # crate::Error and super::Result are re-exports: followed to error.rs, never charged to
        # lib.rs or mod.rs, which use the child.
        code, out = check({
            "lib.rs": "mod error;\nmod store;\npub use error::{Error, Result};\npub use store::Store;\n",
            "error.rs": "pub struct Error;\npub type Result<T> = std::result::Result<T, Error>;\n",
            "store/mod.rs": "mod tcp;\nuse crate::Result;\npub use tcp::Store;\n"
                            "fn f() -> Result<()> { tcp::open() }\n",
            "store/tcp.rs": "use super::Result;\nuse crate::{Error, error};\n"
                            "pub struct Store;\npub fn open() -> Result<()> { Ok(()) }\n",
        }, "-l")
        self.assertEqual(code, 0, out)
        self.assertIn("store/tcp -> error (store/tcp.rs:1,2)", out)

    def test_test_modules_use_super_star(self):
        code, out = check({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::helper;\npub fn f() { helper() }\n"
                    "#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::b::*;\n}\n",
            "b/mod.rs": "mod report;\npub fn helper() { report::render() }\n"
                        "#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::a::f;\n}\n",
            "b/report.rs": "pub fn render() {}\n#[cfg(test)]\nmod tests;\n",
            "b/report/tests.rs": "use super::*;\nuse crate::a::f;\n",
        })
        self.assertEqual(code, 0, out)
        self.assertIn("import circles: none", out)

    def test_a_module_named_alone_is_no_edge_its_uses_are(self):
        # `use crate::a;` in a/b's sibling names the folder; only a::b::f() is used: an edge
        # to a/b, none to a/mod (which uses c).
        code, out = check({
            "lib.rs": "mod a;\nmod c;\n",
            "a/mod.rs": "pub mod b;\nfn g() { crate::c::h() }\n",
            "a/b.rs": "pub fn f() {}\n",
            "c.rs": "use crate::a;\npub fn h() { a::b::f() }\n",
        })
        self.assertEqual(code, 0, out)

    def test_python_one_way(self):
        code, out = check_py({
            "__init__.py": "from . import _shims\nfrom ._backend import Backend\n"
                           "from ._native import Error\n",
            "_holder.py": "import threading\n_asked = threading.local()\n",
            "_work.py": "from ._holder import _asked\nclass Work: pass\n",
            "_backend.py": "from ._work import Work\nclass Backend: pass\n",
            "_shims.py": "from ._backend import Backend\nfrom ._holder import _asked\n"
                         "from ._work import Work\nfrom pkg import Error\n",
        })
        self.assertEqual(code, 0, out)
        self.assertIn("## python/pkg: 5 modules; import circles: none", out)


if __name__ == "__main__":
    unittest.main()
