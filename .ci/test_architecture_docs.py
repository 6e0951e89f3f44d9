#!/usr/bin/env python3
"""Tests of .ci/architecture_docs.py on small trees it builds (two crates, a CLI crate with
subcommands, a Python package, and a document), then on the repository itself: it must pass
when everything is described, name the missing module, crate or edge with the file where it
lives, and not take a module named in another crate's section (or a bare word) as mentioned."""
import os, subprocess, sys, tempfile, textwrap, unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "architecture_docs.py")
REPO = os.path.dirname(HERE)


def manifest(package, deps=(), extra=""):
    lines = ["[package]", f'name = "{package}"', 'version = "0.1.0"', "", "[dependencies]"]
    lines += [f"{d}.workspace = true" for d in deps]
    return "\n".join(lines) + "\n" + extra


# base <- demo <- cli; python -> demo. Modules: base {error, wire/}, demo {error, util, hook/},
# cli {cmd/ with run, serve/}, python {src/native.rs, pkg/_backend.py}.
FILES = {
    "crates/base/Cargo.toml": manifest("phalanx-base"),
    "crates/base/src/lib.rs": "mod error;\nmod wire;\n",
    "crates/base/src/error.rs": "",
    "crates/base/src/wire/mod.rs": "mod frame;\n",
    "crates/base/src/wire/frame.rs": "",
    "crates/demo/Cargo.toml": manifest(
        "phalanx-demo", ["phalanx-base", "thiserror"],
        "\n[dev-dependencies]\nphalanx-cli.workspace = true\n"),
    "crates/demo/src/lib.rs": "mod error;\nmod util;\nmod hook;\n",
    "crates/demo/src/error.rs": "",
    "crates/demo/src/util.rs": "",
    "crates/demo/src/hook.rs": "mod inner;\n",
    "crates/demo/src/hook/inner.rs": "",
    "crates/cli/Cargo.toml": manifest("phalanx-cli", ["phalanx-demo", "phalanx-base"]),
    "crates/cli/src/main.rs": "mod cmd;\n",
    "crates/cli/src/cmd/mod.rs": "mod run;\nmod serve;\n",
    "crates/cli/src/cmd/run.rs": "",
    "crates/cli/src/cmd/serve/mod.rs": "",
    "python/Cargo.toml": textwrap.dedent("""\
        [package]
        name = "phalanx-py"
        [dependencies]
        phalanx-demo = { path = "../crates/demo" }
        pyo3 = { version = "0.30" }
        [workspace]
        """),
    "python/src/lib.rs": "",
    "python/src/native.rs": "",
    "python/pkg/__init__.py": "",
    "python/pkg/_backend.py": "",
}

DOC = textwrap.dedent("""\
    # Architecture

    Every crate returns an error (a bare word, not a module).

    | crate | package | depends on | what it owns |
    |---|---|---|---|
    | `cli/` | phalanx-cli | demo, base | the binary |
    | `python/` | phalanx-py | demo | the Python package |
    | `demo/` | phalanx-demo | base | the demo |
    | `base/` | phalanx-base | — | the base |

    ```sh
    # not a heading: `base/`
    ```

    ### `base/` (phalanx-base)

    - `error`, `wire/` (`frame.rs`).

    ### `demo/` (phalanx-demo)

    - `error`, `util`, `hook/`.
    - The store key `error/<rank>` is not a module.

    ### `cli/` (phalanx-cli)

    - `cmd/`: `run`, `serve/`.

    ### `python/` (phalanx-py)

    - `native.rs`, `pkg/_backend.py`.

    ## Glossary
    """)


def check(files=None, doc=DOC, edit=None):
    """Runs the checker on a tree made of FILES (updated by `files`; a value None removes the
    file) and the document `doc`; returns (exit code, output)."""
    tree = dict(FILES)
    tree.update(files or {})
    tree["docs/architecture.md"] = doc
    with tempfile.TemporaryDirectory() as root:
        for name, text in tree.items():
            if text is None:
                continue
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        p = subprocess.run([sys.executable, CHECKER, root], capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr


class Passes(unittest.TestCase):
    def test_all_described(self):
        code, out = check()
        self.assertEqual(code, 0, out)
        self.assertEqual(len(out.strip().splitlines()), 1, out)
        self.assertIn("3 crates and python/, 10 modules, 4 dependency edges", out)

    def test_path_anywhere_counts(self):
        doc = DOC.replace("`error`, `util`, `hook/`.", "`error`, `hook/`.") + (
            "\nSee `crates/demo/src/util.rs` for the helpers.\n")
        code, out = check(doc=doc)
        self.assertEqual(code, 0, out)

    def test_manifest_forms(self):
        # [dependencies.NAME] tables, renamed packages and target-specific tables are edges;
        # dev-dependencies (demo -> cli above) are not.
        code, out = check({"crates/cli/Cargo.toml": textwrap.dedent("""\
            [package]
            name = "phalanx-cli"
            [dependencies.phalanx-demo]
            workspace = true
            [target.'cfg(unix)'.dependencies]
            b = { package = "phalanx-base", path = "../base" }
            """)})
        self.assertEqual(code, 0, out)


class Fails(unittest.TestCase):
    def test_module_removed_from_text(self):
        code, out = check(doc=DOC.replace("`error`, `util`, `hook/`.", "`error`, `hook/`."))
        self.assertEqual(code, 1, out)
        self.assertIn("crates/demo/src/util.rs: module `util`", out)
        self.assertEqual(out.count("module `"), 1, out)

    def test_folder_module_removed(self):
        code, out = check(doc=DOC.replace(", `wire/` (`frame.rs`)", ""))
        self.assertEqual(code, 1, out)
        self.assertIn("crates/base/src/wire/: module `wire`", out)

    def test_subcommand_removed(self):
        code, out = check(doc=DOC.replace("`run`, ", ""))
        self.assertEqual(code, 1, out)
        self.assertIn("crates/cli/src/cmd/run.rs: module `run`", out)

    def test_python_module_removed(self):
        code, out = check(doc=DOC.replace(", `pkg/_backend.py`", ""))
        self.assertEqual(code, 1, out)
        self.assertIn("python/pkg/_backend.py: module `_backend`", out)

    def test_crate_removed_from_text(self):
        doc = DOC.replace("| `base/` | phalanx-base | — | the base |\n", "")
        doc = doc.replace("### `base/` (phalanx-base)\n\n- `error`, `wire/` (`frame.rs`).\n\n", "")
        code, out = check(doc=doc)
        self.assertEqual(code, 1, out)
        self.assertIn("crates/base/Cargo.toml: `base/` (phalanx-base) has no row", out)
        self.assertIn("crates/base/Cargo.toml: `base/` (phalanx-base) has no section", out)
        self.assertIn("crates/base/src/error.rs: module `error`", out)

    def test_new_crate_undescribed(self):
        code, out = check({"crates/extra/Cargo.toml": manifest("phalanx-extra"),
                           "crates/extra/src/lib.rs": "mod thing;\n",
                           "crates/extra/src/thing.rs": ""})
        self.assertEqual(code, 1, out)
        self.assertIn("crates/extra/Cargo.toml: `extra/` (phalanx-extra) has no row", out)
        self.assertIn("crates/extra/src/thing.rs: module `thing`", out)

    def test_same_name_in_another_section_does_not_count(self):
        # base's `error` is gone from base's section; demo's section (and the prose, and the
        # store key) still say error, which must not count for base.
        code, out = check(doc=DOC.replace("- `error`, `wire/`", "- `wire/`"))
        self.assertEqual(code, 1, out)
        self.assertIn("crates/base/src/error.rs: module `error` of `base/`", out)
        self.assertNotIn("crates/demo/src/error.rs", out)

    def test_code_span_counts_whole_only(self):
        code, out = check(doc=DOC.replace("- `error`, `util`", "- `util`"))
        self.assertEqual(code, 1, out)
        self.assertIn("crates/demo/src/error.rs: module `error`", out)

    def test_heading_in_fenced_code_is_no_section(self):
        doc = DOC.replace("### `base/` (phalanx-base)\n\n- `error`, `wire/` (`frame.rs`).\n\n", "")
        doc = doc.replace("# not a heading: `base/`", "# `base/`\n- `error`, `wire/`")
        code, out = check(doc=doc)
        self.assertEqual(code, 1, out)
        self.assertIn("has no section", out)

    def test_edge_missing_from_table(self):
        code, out = check(doc=DOC.replace("| phalanx-cli | demo, base |", "| phalanx-cli | demo |"))
        self.assertEqual(code, 1, out)
        self.assertIn("crates/cli/Cargo.toml: `cli/` (phalanx-cli) depends on base, demo", out)
        self.assertIn("missing: base", out)

    def test_edge_added_to_manifest(self):
        code, out = check({"crates/base/Cargo.toml": manifest("phalanx-base", ["phalanx-demo"])})
        self.assertEqual(code, 1, out)
        self.assertIn("crates/base/Cargo.toml: `base/` (phalanx-base) depends on demo", out)
        self.assertIn("whose row is above it", out)

    def test_rows_must_point_down(self):
        doc = DOC.replace("| `demo/` | phalanx-demo | base | the demo |\n"
                          "| `base/` | phalanx-base | — | the base |\n",
                          "| `base/` | phalanx-base | — | the base |\n"
                          "| `demo/` | phalanx-demo | base | the demo |\n")
        code, out = check(doc=doc)
        self.assertEqual(code, 1, out)
        self.assertIn("`demo/` (phalanx-demo) depends on `base/`, whose row is above it", out)

    def test_stale_row(self):
        doc = DOC.replace("| `base/` |", "| `gone/` | phalanx-gone | — | x |\n| `base/` |")
        code, out = check(doc=doc)
        self.assertEqual(code, 1, out)
        self.assertIn("row for `gone/`, which is no crate of this tree", out)


class Repository(unittest.TestCase):
    def test_real_repo_passes(self):
        p = subprocess.run([sys.executable, CHECKER, REPO], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("describes the tree", p.stdout)


if __name__ == "__main__":
    unittest.main()
