#!/usr/bin/env python3
"""Whether docs/architecture.md still describes the tree: every crate, its dependency edges,
every top-level module, and the Python package.

    python3 .ci/architecture_docs.py [ROOT]   # one line when all is described; exit 1 otherwise

What the tree has (read from the files, nothing built):
- crates: every `crates/X/` with a `Cargo.toml`, known by its directory `X` and its package
  name (`phalanx-X`); the Python package `python/` (when `python/Cargo.toml` exists) counts
  as one more, `python/`, with its package name (`phalanx-torch`).
- dependency edges: the phalanx crates in each manifest's `[dependencies]` tables (also
  `[target.….dependencies]` and `[dependencies.NAME]`; dev- and build-dependencies are not
  edges), matched by package name (`package = "…"` renames are followed).
- top-level modules of crate X: each file `crates/X/src/NAME.rs` and each folder
  `crates/X/src/NAME/` (a module that is both counts once); `lib.rs`, `main.rs`, `mod.rs` and
  `src/bin/` are not modules. A crate with a `src/cmd/` folder (the CLI) also has each
  subcommand module under it, `crates/X/src/cmd/NAME.rs` or `…/cmd/NAME/` (`mod.rs` aside).
- modules of `python/`: `python/src/NAME.rs` (not `lib.rs`) and `python/PKG/NAME.py` for each
  folder PKG with an `__init__.py` (not `__init__.py` itself).

What the document must have:
1. A crate table: the first Markdown table whose header has a column starting "depends on".
   Each crate (and `python/`) has a row whose first cell names it (`pg/`, `crates/pg`,
   `phalanx-pg`); its "depends on" cell lists exactly the crate's dependency edges, comma
   separated, as directory or package names (`—` or empty for none); and every crate a row
   depends on has its row *below* it (dependencies point down only). A row naming no crate
   of the tree is an error (a crate that was removed or renamed).
2. A section per crate: a heading (outside fenced code) whose first code span, or else its
   first word, names the crate as above; the section runs to the next heading of the same or
   a higher level. A crate may have several such sections; they count together.
3. Each module mentioned, in one of two ways:
   - in its crate's section, as a code span that is exactly the module, optionally as a file
     or a path into its folder: `subgroup`, `subgroup.rs`, `flight_recorder/`,
     `flight_recorder/pickle.rs`, `src/flight_recorder/`, `pg/src/subgroup.rs`; for the CLI's
     subcommands also with `cmd/` (`cmd/bench/`); for `python/`, `group.rs`, `src/group.rs`,
     `_backend.py`, `phalanx_torch/_backend.py`, `phalanx_torch.ft`;
   - anywhere in the document (code spans, fenced blocks or prose) as the module's path from
     its crate, `pg/src/subgroup` or `crates/pg/src/subgroup` (then `.rs`, `/`, or anything
     that is not part of a name), or `python/src/group.rs`, `python/phalanx_torch/ft.py`.
   A bare word does not count, nor a code span in another crate's section: `error` written in
   the section of `pg/` mentions pg's `error` module only, and the word "error" in prose
   mentions none. A code span only counts whole, so `error/<rank>` (a store key) is not the
   module `error`.

Each missing item is printed on a line of its own, starting with the file where it lives.
"""
import glob
import os
import re
import sys

DOC = os.path.join("docs", "architecture.md")


# ---- the tree -------------------------------------------------------------------------------


def read_manifest(path):
    """(package name, [dependency package names]) of a Cargo.toml: the normal dependencies
    only. A small line reader, enough for Cargo manifests (Python 3.8 has no tomllib)."""
    name, deps = None, []
    section = None
    table_dep = None  # [dependencies.NAME]: the dependency this table describes
    for raw in open(path, encoding="utf-8"):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        header = re.match(r"^\[([^\[\]]+)\]\s*(#.*)?$", line)
        if header or line.startswith("[["):
            section = header.group(1).strip() if header else None
            table_dep = None
            if section:
                m = re.match(r"^(?:target\..+\.)?dependencies\.([A-Za-z0-9_-]+)$", section)
                if m:
                    table_dep = m.group(1)
                    deps.append(table_dep)
            continue
        if section == "package":
            m = re.match(r'^name\s*=\s*"([^"]+)"', line)
            if m:
                name = m.group(1)
        elif table_dep is not None:
            m = re.match(r'^package\s*=\s*"([^"]+)"', line)
            if m:
                deps[-1] = m.group(1)
        elif section is not None and re.match(r"^(?:target\..+\.)?dependencies$", section):
            m = re.match(r"^([A-Za-z0-9_-]+)\s*(?:\.\s*[A-Za-z0-9_-]+\s*)?=", line)
            if m:
                renamed = re.search(r'\bpackage\s*=\s*"([^"]+)"', line)
                deps.append(renamed.group(1) if renamed else m.group(1))
    return name, deps


class Unit:
    """A crate, or the Python package: what the document must describe of it."""

    def __init__(self, key, home, package, deps, modules):
        self.key = key  # "pg", or "python"
        self.home = home  # "crates/pg", or "python"
        self.package = package
        self.deps = deps  # [package names]
        self.modules = modules  # [Module]

    def label(self):
        return f"`{self.key}/` ({self.package})" if self.package else f"`{self.key}/`"

    def names(self):
        """The spellings that name this unit in a heading or a table cell."""
        out = {self.key, self.home}
        if self.package:
            out.add(self.package)
        return out


class Module:
    def __init__(self, short, where, span_re, path_re):
        self.short = short  # "subgroup", or "bench" for cmd/bench
        self.where = where  # the file or folder it lives in, from ROOT
        self.span_re = span_re  # a whole code span in its crate's section
        self.path_re = path_re  # a path anywhere in the document


def rust_modules(root, crate):
    """Top-level modules of crates/<crate>/src, and the CLI's subcommand modules."""
    src = os.path.join(root, "crates", crate, "src")
    out = []

    def scan(folder, skip):
        found = {}
        if not os.path.isdir(folder):
            return found
        for entry in sorted(os.listdir(folder)):
            full = os.path.join(folder, entry)
            if os.path.isfile(full) and entry.endswith(".rs") and entry not in skip:
                found.setdefault(entry[:-3], entry)
            elif os.path.isdir(full) and entry != "bin" and glob.glob(
                os.path.join(full, "**", "*.rs"), recursive=True
            ):
                found.setdefault(entry, f"{entry}/")
                if os.path.isfile(os.path.join(folder, entry + ".rs")):
                    found[entry] = f"{entry}.rs"
        return found

    tail = r"(?:\.rs|/(?:[\w.-]+/)*(?:[\w-]+\.rs)?)?"
    crate_re = re.escape(crate)
    for short, where in scan(src, {"lib.rs", "main.rs", "mod.rs"}).items():
        name = re.escape(short)
        out.append(Module(
            short, f"crates/{crate}/src/{where}",
            re.compile(rf"(?:(?:crates/)?{crate_re}/)?(?:src/)?{name}{tail}"),
            re.compile(rf"(?<![\w/])(?:crates/)?{crate_re}/src/{name}(?![\w-])"),
        ))
    cmd = os.path.join(src, "cmd")
    if os.path.isdir(cmd):
        for short, where in scan(cmd, {"mod.rs"}).items():
            name = re.escape(short)
            out.append(Module(
                short, f"crates/{crate}/src/cmd/{where}",
                re.compile(rf"(?:(?:crates/)?{crate_re}/)?(?:src/)?(?:cmd/)?{name}{tail}"),
                re.compile(rf"(?<![\w/])(?:crates/)?{crate_re}/src/cmd/{name}(?![\w-])"),
            ))
    return out


def python_modules(root):
    """Modules of python/: the native crate's files and each Python package's."""
    out = []
    for f in sorted(glob.glob(os.path.join(root, "python", "src", "*.rs"))):
        short = os.path.basename(f)[:-3]
        if short == "lib":
            continue
        name = re.escape(short)
        out.append(Module(
            short, f"python/src/{short}.rs",
            re.compile(rf"(?:(?:python/)?src/)?{name}(?:\.rs)?"),
            re.compile(rf"(?<![\w/])python/src/{name}\.rs(?![\w-])"),
        ))
    for init in sorted(glob.glob(os.path.join(root, "python", "*", "__init__.py"))):
        pkg = os.path.basename(os.path.dirname(init))
        for f in sorted(glob.glob(os.path.join(root, "python", pkg, "*.py"))):
            short = os.path.basename(f)[:-3]
            if short == "__init__":
                continue
            name, p = re.escape(short), re.escape(pkg)
            out.append(Module(
                short, f"python/{pkg}/{short}.py",
                re.compile(rf"(?:(?:(?:python/)?{p}/)?{name}(?:\.py)?|{p}\.{name})"),
                re.compile(rf"(?<![\w/])python/{p}/{name}\.py(?![\w-])"),
            ))
    return out


def read_tree(root):
    units = []
    for manifest in sorted(glob.glob(os.path.join(root, "crates", "*", "Cargo.toml"))):
        crate = os.path.basename(os.path.dirname(manifest))
        package, deps = read_manifest(manifest)
        units.append(Unit(crate, f"crates/{crate}", package, deps, rust_modules(root, crate)))
    py_manifest = os.path.join(root, "python", "Cargo.toml")
    if os.path.isfile(py_manifest):
        package, deps = read_manifest(py_manifest)
        units.append(Unit("python", "python", package, deps, python_modules(root)))
    packages = {u.package: u.key for u in units if u.package}
    for u in units:
        # Only edges to phalanx crates of this tree; external crates are not in the graph.
        u.deps = sorted({packages[d] for d in u.deps if d in packages and packages[d] != u.key})
    return units


# ---- the document ---------------------------------------------------------------------------


CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def split_doc(text):
    """(headings, prose lines): headings as (line index, level, text), outside fenced code;
    prose lines are the lines outside fenced code (others become empty)."""
    headings, prose, fence = [], [], None
    for i, line in enumerate(text.split("\n")):
        m = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark[0] * len(mark)
            elif mark.startswith(fence):
                fence = None
            prose.append("")
            continue
        if fence is not None:
            prose.append("")
            continue
        prose.append(line)
        h = re.match(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if h:
            headings.append((i, len(h.group(1)), h.group(2)))
    return headings, prose


def normalise(name):
    """`crates/pg/`, `pg/`, `pg` -> `pg`; a package name stays as it is."""
    name = name.strip().strip("`").strip()
    name = name[len("crates/"):] if name.startswith("crates/") else name
    return name.rstrip("/")


def unit_named(units, name):
    name = normalise(name)
    for u in units:
        if name in {normalise(n) for n in u.names()}:
            return u
    return None


def heading_unit(units, text):
    """The crate a heading opens the section of: its first code span names it, or else its
    first word does as a path (`pg/`, `crates/pg`) or a package name, never a bare word (a
    heading "Data flows" is no section of `data/`)."""
    spans = CODE_SPAN.findall(text)
    if spans:
        return unit_named(units, spans[0])
    first = (text.split() or [""])[0]
    u = unit_named(units, first)
    if u and (first.endswith("/") or first.startswith("crates/") or first == u.package):
        return u
    return None


def sections(units, headings, prose):
    """unit key -> the prose lines of its sections, joined."""
    out = {}
    for n, (i, level, text) in enumerate(headings):
        u = heading_unit(units, text)
        if u is None:
            continue
        end = len(prose)
        for j, lvl, _ in headings[n + 1:]:
            if lvl <= level:
                end = j
                break
        out.setdefault(u.key, []).extend(prose[i + 1:end])
    return {k: "\n".join(v) for k, v in out.items()}


def table_cells(line):
    line = line.strip()
    if not line.startswith("|"):
        return None
    # A cell may hold an escaped pipe (`a\|b`), as README's tables do.
    body = line[1:-1] if line.endswith("|") else line[1:]
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def crate_table(prose):
    """The rows of the first table with a "depends on" column, top to bottom, as (first
    cell, depends-on cell); None when there is no such table."""
    lines = prose
    for i, line in enumerate(lines):
        head = table_cells(line)
        if not head or i + 1 >= len(lines):
            continue
        col = next((k for k, c in enumerate(head) if c.lower().startswith("depends on")), None)
        if col is None or not re.match(r"^\s*\|?\s*:?-{3,}", lines[i + 1]):
            continue
        rows = []
        for row_line in lines[i + 2:]:
            cells = table_cells(row_line)
            if cells is None:
                break
            rows.append((cells[0], cells[col] if col < len(cells) else ""))
        return rows
    return None


# ---- the check ------------------------------------------------------------------------------


def check(root):
    """The problems found, one line each (empty when the document describes the tree), and a
    summary of what was checked."""
    units = read_tree(root)
    doc_path = os.path.join(root, DOC)
    if not os.path.isfile(doc_path):
        return [f"{DOC}: not found"], ""
    text = open(doc_path, encoding="utf-8").read()
    headings, prose = split_doc(text)
    problems = []

    # 1. The crate table: a row per crate, its edges, rows ordered so dependencies point down.
    rows = crate_table(prose)
    if rows is None:
        problems.append(f"{DOC}: no crate table (a Markdown table with a \"depends on\" column)")
        rows = []
    position = {}
    for k, (first, deps_cell) in enumerate(rows):
        spans = CODE_SPAN.findall(first)
        u = unit_named(units, spans[0] if spans else first)
        if u is None:
            problems.append(f"{DOC}: the crate table has a row for {first}, which is no crate "
                            f"of this tree (no crates/{normalise(first)}/Cargo.toml)")
            continue
        position[u.key] = k
        listed = set()
        for item in re.split(r"[,·]", deps_cell):
            item = item.strip()
            if item in ("", "—", "–", "-", "none"):
                continue
            dep = unit_named(units, item)
            if dep is None:
                problems.append(f"{DOC}: the crate table's row for {u.label()} depends on "
                                f"{item}, which is no crate of this tree")
            else:
                listed.add(dep.key)
        actual = set(u.deps)
        if listed != actual:
            missing = ", ".join(sorted(actual - listed)) or "none"
            extra = ", ".join(sorted(listed - actual)) or "none"
            problems.append(f"{u.home}/Cargo.toml: {u.label()} depends on "
                            f"{', '.join(u.deps) or 'no phalanx crate'}; the crate table of "
                            f"{DOC} says {', '.join(sorted(listed)) or 'none'} "
                            f"(missing: {missing}; not a dependency: {extra})")
    for u in units:
        if u.key not in position:
            problems.append(f"{u.home}/Cargo.toml: {u.label()} has no row in the crate table "
                            f"of {DOC}")
            continue
        for d in u.deps:
            if d in position and position[d] < position[u.key]:
                problems.append(f"{DOC}: in the crate table, {u.label()} depends on `{d}/`, "
                                f"whose row is above it (dependencies point down only)")

    # 2. A section per crate; 3. each module mentioned in it, or by its path anywhere.
    secs = sections(units, headings, prose)
    n_modules = 0
    for u in units:
        sec = secs.get(u.key)
        if sec is None:
            problems.append(f"{u.home}/Cargo.toml: {u.label()} has no section in {DOC} "
                            f"(a heading naming `{u.key}/` or {u.package})")
        spans = {s.strip() for s in CODE_SPAN.findall(sec or "")}
        for m in u.modules:
            n_modules += 1
            if any(m.span_re.fullmatch(s) for s in spans) or m.path_re.search(text):
                continue
            problems.append(f"{m.where}: module `{m.short}` of {u.label()} is not mentioned in "
                            f"{DOC} (`{m.short}` in the section of `{u.key}/`, or its path)")
    crates = sum(1 for u in units if u.home != "python")
    summary = (f"{DOC} describes the tree: {crates} crates"
               + (" and python/" if len(units) > crates else "")
               + f", {n_modules} modules, {sum(len(u.deps) for u in units)} dependency edges")
    return problems, summary


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("-")]
    if any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__)
        return 0
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems, summary = check(root)
    if problems:
        for p in problems:
            print(p)
        print(f"{DOC} does not describe the tree: {len(problems)} problem(s) above")
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
