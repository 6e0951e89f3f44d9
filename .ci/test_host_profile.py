#!/usr/bin/env python3
"""Tests of .ci/host_profile.py: on a small path-only workspace it builds (a library, the
library it uses, a proc macro and the crate only the proc macro uses), it must pass when only
the proc macro's own dependency is unoptimised and name the program's dependency when that is;
then the repository's Cargo.toml must pass."""
import contextlib, io, os, subprocess, sys, tempfile, textwrap, unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import host_profile  # noqa: E402


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def package(name, deps=(), proc_macro=False, where="../../vendor"):
    text = f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n'
    if proc_macro:
        text += "\n[lib]\nproc-macro = true\n"
    text += "\n[dependencies]\n" + "".join(f'{d} = {{ path = "{where}/{d}" }}\n' for d in deps)
    return text


class Workspace:
    """The member app; app -> helper (normal) and app -> mac (a proc macro, not a member, as
    crates/host-features) -> hostonly, all three in vendor/."""

    def __init__(self, unoptimised):
        self.dir = tempfile.TemporaryDirectory()
        root = self.dir.name
        crates = {"crates/app": package("app", ["helper", "mac"]),
                  "vendor/helper": package("helper"),
                  "vendor/mac": package("mac", ["hostonly"], proc_macro=True, where=".."),
                  "vendor/hostonly": package("hostonly")}
        for folder, manifest in crates.items():
            os.makedirs(os.path.join(root, folder, "src"))
            write(os.path.join(root, folder, "Cargo.toml"), manifest)
            write(os.path.join(root, folder, "src", "lib.rs"), "")
        profile = "".join(f"{n} = {{ opt-level = 0, debug = false }}\n" for n in unoptimised)
        self.manifest = os.path.join(root, "Cargo.toml")
        write(self.manifest, textwrap.dedent("""\
            [workspace]
            resolver = "2"
            members = ["crates/*"]
            exclude = ["vendor"]

            [profile.dev.package."*"]
            opt-level = 3

            [profile.dev.package]
            """) + profile)
        subprocess.run(["cargo", "generate-lockfile", "--offline"], cwd=root, check=True,
                       capture_output=True)

    def check(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = host_profile.main(["host_profile.py", self.manifest], features="")
        return rc, err.getvalue()


class HostProfileTest(unittest.TestCase):
    def test_reads_only_opt_level_zero_of_the_dev_package_table(self):
        text = textwrap.dedent("""\
            [profile.dev.package."*"]
            opt-level = 3
            [profile.dev.package]
            syn = { opt-level = 0, debug = false }
            "serde_derive" = { opt-level = 0 }
            burn = { opt-level = 2 }
            [profile.release.package]
            quote = { opt-level = 0 }
            """)
        self.assertEqual(host_profile.unoptimised(text), ["syn", "serde_derive"])

    def test_a_proc_macros_own_dependency_passes(self):
        ws = Workspace(["mac", "hostonly"])
        self.addCleanup(ws.dir.cleanup)
        self.assertEqual(ws.check(), (0, ""))

    def test_a_programs_dependency_is_named(self):
        ws = Workspace(["hostonly", "helper"])
        self.addCleanup(ws.dir.cleanup)
        rc, err = ws.check()
        self.assertEqual(rc, 1)
        self.assertIn("`helper`", err)
        self.assertNotIn("`hostonly`", err)

    def test_the_repository_passes(self):
        self.assertEqual(host_profile.main(["host_profile.py"]), 0)


if __name__ == "__main__":
    unittest.main()
