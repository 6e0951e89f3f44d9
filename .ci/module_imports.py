#!/usr/bin/env python3
"""Which modules of each crate import which, and whether they import each other in a circle.

STYLE: no import circle between the modules of a crate, of any length (a -> b -> a, or
a -> b -> c -> a; a folder's parent uses its children, never the reverse). Every source file
is a node: each crate's `src/**/*.rs` (crates/*/src and python/src, the native half of
phalanx_torch), a folder's `mod.rs` and each of its children apart, and each `.py` file of a
Python package under python/. The circles are the strongly connected components of that graph
(Tarjan's algorithm), each printed as one closed path through all of its files.

Rust: a file imports another when a `use` or a path in its code names an item that the other
defines. Paths are resolved as rustc does, by module: `crate::`, `self::`, `super::` (any
number), a child module's or an imported name's own path (`child::f()`, `use x as y; y::f()`),
nested use-groups, items of inline modules (they belong to their file); `crate::a::b::Item`
lands in the deepest module that exists, and a name a module only re-exports (`pub use`, or a
private `use` its children see) is followed, hop by hop, to the module that defines it, so a
facade (lib.rs, a mod.rs that re-exports) is an edge only for what it defines itself; a name
no module defines (made by a macro) is charged to the module the path names, or to the module
a glob re-exports it from when a macro runs there. A re-export is a use: lib.rs's
`pub use a::X` is lib -> a. `mod child;` is no edge (a parent owns its children); a parent's
`child::X` is parent -> child, a child's `super::X` with X defined in mod.rs is
child -> parent, and `use super::*` in a file of its own is child -> parent. The bodies of
`#[cfg(test)]` modules are not read (a test is no import of the module it tests; a `mod
tests;` file is a node no module imports). A macro_rules! is charged where it is defined
(textual scope, or `crate::m!` for #[macro_export]). A module named alone (`use crate::a;`)
is no edge; its uses (`a::f()`) are. Not seen: `#[path]` attributes, paths inside string
literals (serde's `with = "..."`).

Python: every `import`/`from ... import` anywhere in a module, in functions too (a lazy import
defers a circle, it does not remove it), relative (`.`, `..`) or absolute
(`phalanx_torch._x`); `from pkg import name` follows the package's `__init__` re-exports like
a Rust facade; the parent package's implicit import does not count, nor do
`importlib.import_module` strings.

    python3 .ci/module_imports.py [ROOT]   # one line per crate; exit 1 on a circle
    python3 .ci/module_imports.py -l       # also each module's imports, with file:line
"""
import ast
import glob
import os
import re
import sys

# ---------------------------------------------------------------------------------------------
# The graph and its circles


def circles(graph):
    """Each import circle of `graph` (module -> set of modules) as a closed path [a, b, ..., a],
    one per strongly connected component of two or more modules."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(path_around(graph, set(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _shortest(graph, comp, start, goal):
    """A shortest path start -> ... -> v with goal(v), inside comp, breadth first."""
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if goal(w):
                    path = [w, v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path))
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return None


def path_around(graph, comp):
    """A closed path through every module of the component, from its first module: go on to the
    nearest module not yet on the path, then back to the start by a shortest way (for a
    simple circle, the circle itself)."""
    start = min(comp)
    path, seen = [start], {start}
    while seen != comp:
        step = _shortest(graph, comp, path[-1], lambda w: w not in seen)
        if step is None:
            break
        path += step[1:]
        seen.update(step)
    back = _shortest(graph, comp, path[-1], lambda w: w == start)
    return path + (back[1:] if back else [start])


# ---------------------------------------------------------------------------------------------
# Rust: lexing


def blank(t):
    """`t` with comments, string and char literals replaced by spaces (newlines kept), so that
    what is left is code, at the same offsets."""
    out, i, n = list(t), 0, len(t)

    def wipe(a, b):
        for k in range(a, min(b, n)):
            if out[k] != '\n':
                out[k] = ' '

    while i < n:
        c = t[i]
        if c == '/' and t.startswith('//', i):
            j = t.find('\n', i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif c == '/' and t.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if t.startswith('/*', j):
                    depth += 1
                    j += 2
                elif t.startswith('*/', j):
                    depth -= 1
                    j += 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif c in 'rb' and re.match(r'(?:br|r)#*"', t[i:i + 300]) and (i == 0 or not (t[i - 1].isalnum() or t[i - 1] == '_')):
            m = re.match(r'(?:br|r)(#*)"', t[i:])
            end = t.find('"' + m.group(1), i + m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            wipe(i, j)
            i = j
        elif c == '"' or (c == 'b' and t.startswith('b"', i) and (i == 0 or not (t[i - 1].isalnum() or t[i - 1] == '_'))):
            j = i + (2 if c == 'b' else 1)
            while j < n and t[j] != '"':
                j += 2 if t[j] == '\\' else 1
            wipe(i, j + 1)
            i = j + 1
        elif c == "'":
            m = re.match(r"'(?:\\(?:u\{[0-9a-fA-F_]*\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'", t[i:i + 16])
            if m:
                wipe(i, i + m.end())
                i += m.end()
            else:
                i += 1  # a lifetime or label
        else:
            i += 1
    return ''.join(out)


def matching(t, i):
    """Offset of the bracket closing the one at t[i]."""
    open_, close = t[i], {'{': '}', '(': ')', '[': ']'}[t[i]]
    depth = 0
    for j in range(i, len(t)):
        if t[j] == open_:
            depth += 1
        elif t[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return len(t) - 1


def depths(t):
    """Brace depth before each offset."""
    d, out = 0, []
    for c in t:
        out.append(d)
        if c == '{':
            d += 1
        elif c == '}':
            d -= 1
    out.append(d)
    return out


TEST_CFG = re.compile(r'#\s*\[\s*cfg\s*\(\s*(?:all\s*\([^)]*\btest\b|test\s*\))')
KEYWORDS = {'fn', 'mut', 'unsafe', 'extern', 'async', 'const', 'crate', 'self', 'super', 'in', 'for',
            'impl', 'where', 'as', 'dyn', 'move', 'ref', 'static', 'type', 'use', 'mod', 'pub'}


def attributes_before(t, i):
    """The attributes (and visibility) written just before offset i, as one string."""
    j = i
    while True:
        k = j
        while k > 0 and t[k - 1].isspace():
            k -= 1
        m = re.search(r'pub\s*(?:\([^)]*\))?\s*$', t[max(0, k - 40):k])
        if m and m.group(0).strip():
            j = k - len(m.group(0))
            continue
        if k > 0 and t[k - 1] == ']':
            depth, s = 0, k - 1
            while s >= 0:
                if t[s] == ']':
                    depth += 1
                elif t[s] == '[':
                    depth -= 1
                    if depth == 0:
                        break
                s -= 1
            s2 = s - 1
            while s2 >= 0 and t[s2].isspace():
                s2 -= 1
            if s2 >= 0 and t[s2] == '#':
                j = s2
                continue
        return t[j:i]


def without_tests(t):
    """`t` with the bodies of its `#[cfg(test)]` modules blanked: a test is no import of the
    module it tests (a test module in a file of its own, `mod tests;`, is a node no one
    imports, so it can close no circle either)."""
    for m in list(re.finditer(r'\bmod\s+\w+\s*\{', t)):
        if TEST_CFG.search(attributes_before(t, m.start())):
            end = matching(t, m.end() - 1)
            t = t[:m.end()] + re.sub(r'[^\n]', ' ', t[m.end():end]) + t[end:]
    return t


# ---------------------------------------------------------------------------------------------
# Rust: use trees


def use_leaves(body, base):
    """The leaves of one use tree (the text between `use` and `;`, at offset `base`):
    (segments, alias or None, offset), segments ending in '*' for a glob."""
    toks = [(m.group(0), base + m.start()) for m in re.finditer(r'\$?\w+|::|[{},*]', body)]
    out = []

    def tree(k, prefix):
        segs = list(prefix)
        pos = toks[k][1] if k < len(toks) else base
        if k < len(toks) and toks[k][0] == '::':  # leading `::`: an extern crate
            segs.append('::')
            k += 1
        while k < len(toks):
            tok, pos = toks[k]
            if tok == '{':
                k += 1
                while k < len(toks) and toks[k][0] != '}':
                    if toks[k][0] == ',':
                        k += 1
                        continue
                    k = tree(k, segs)
                return k + 1
            if tok == '*':
                out.append((segs + ['*'], None, pos))
                return k + 1
            if tok in (',', '}'):
                return k
            if tok == '::':
                k += 1
                continue
            if tok == 'as' and segs and k + 1 < len(toks):
                alias = toks[k + 1][0]
                out.append((segs, alias, pos))
                return k + 2
            segs.append(tok)
            k += 1
            if k >= len(toks) or toks[k][0] in (',', '}'):
                out.append((segs, None, pos))
                return k
        if segs:
            out.append((segs, None, pos))
        return k

    k = 0
    while k < len(toks):
        k = tree(k, []) if toks[k][0] != ',' else k + 1
    fixed = []
    for segs, alias, pos in out:
        if len(segs) > 1 and segs[-1] == 'self':
            segs = segs[:-1]
        fixed.append((segs, alias, pos))
    return fixed


# ---------------------------------------------------------------------------------------------
# Rust: the module tree of one crate


class Module:
    def __init__(self, path, file):
        self.path, self.file = path, file
        self.items = set()      # names this module defines
        self.children = set()   # its modules (inline or files)
        self.bindings = {}      # name -> (scope, segments) of a `use`
        self.globs = []         # (scope, segments) of `use x::*`
        self.macro_made = False  # invokes a macro among its items (which may define names)


class Crate:
    def __init__(self, label, src, root):
        self.label, self.src = label, src
        self.mods = {}          # module path -> Module
        self.files = {}         # file -> (module path, code, scopes, depths, use leaves)
        self.exported = {}      # #[macro_export] macro name -> file
        self.macros = {}        # file -> macro_rules! names defined there
        self.read(root, (), True)
        for f in sorted(glob.glob(os.path.join(src, '**', '*.rs'), recursive=True)):
            rel = os.path.relpath(f, src)
            if f in self.files or rel.split(os.sep)[0] == 'bin' or rel in ('lib.rs', 'main.rs'):
                continue
            parts = rel[:-3].split(os.sep)  # no `mod` declares it: place it where it lies
            if parts[-1] == 'mod':
                parts = parts[:-1]
            self.read(f, tuple(parts), parts == [] or rel.endswith('mod.rs'))

    def node(self, f):
        return os.path.relpath(f, self.src)[:-3]

    def read(self, f, path, mod_rs):
        raw = open(f, encoding='utf-8', errors='replace').read()
        t = blank(raw)
        t = re.sub(r'pub\s*\(\s*in\s+[^)]*\)', lambda m: ' ' * len(m.group(0)), t)
        t = without_tests(t)
        dep = depths(t)
        scopes = [(0, len(t), path, 0)]  # (start, end, module path, brace depth inside)
        self.mods.setdefault(path, Module(path, f))
        self.mods[path].file = f
        declared = []
        for m in re.finditer(r'\bmod\s+(\w+)\s*([;{])', t):
            scope = self.scope_at(scopes, m.start())
            name = m.group(1)
            self.mods[scope[2]].children.add(name)
            child = scope[2] + (name,)
            if m.group(2) == '{':
                end = matching(t, m.end() - 1)
                scopes.append((m.end(), end, child, dep[m.end()]))
                self.mods.setdefault(child, Module(child, f))
            else:
                declared.append((scope[2][len(path):], name, child))
        # items each module defines, at its own brace depth
        for m in re.finditer(r'\b(?:fn|struct|enum|trait|type|const|static|union)\s+(\w+)'
                             r'|\bmacro_rules!\s*(\w+)|\bextern\s+crate\s+(\w+)(?:\s+as\s+(\w+))?', t):
            s = self.scope_at(scopes, m.start())
            name = m.group(1) or m.group(2)
            if m.group(3):
                self.mods[s[2]].bindings[m.group(4) or m.group(3)] = (s[2], ['::', m.group(3)])
                continue
            if name in KEYWORDS:
                continue
            if m.group(2):
                self.macros.setdefault(f, set()).add(name)
                if 'macro_export' in attributes_before(t, m.start()):
                    self.exported[name] = f
            if dep[m.start()] == s[3]:
                self.mods[s[2]].items.add(name)
        for m in re.finditer(r'(?<![\w:$])(\w+(?:\s*::\s*\w+)*)\s*!\s*[({\[]', t):
            s = self.scope_at(scopes, m.start())
            if m.group(1) != 'macro_rules' and dep[m.start()] == s[3]:
                self.mods[s[2]].macro_made = True
        # use declarations: bindings (module-level and in bodies alike) and their leaves
        uses, code = [], list(t)
        for m in re.finditer(r'(?<![\w$])use\b', t):
            end = t.find(';', m.end())
            end = len(t) if end < 0 else end
            s = self.scope_at(scopes, m.start())
            for segs, alias, pos in use_leaves(t[m.end():end], m.end()):
                uses.append((s[2], segs, pos))
                if segs[-1] == '*':
                    self.mods[s[2]].globs.append((s[2], segs))
                elif alias != '_':
                    self.mods[s[2]].bindings[alias or segs[-1]] = (s[2], segs)
            for k in range(m.start(), end + 1):  # the paths left to read are the code's
                if k < len(code) and code[k] != '\n':
                    code[k] = ' '
        self.files[f] = (path, ''.join(code), scopes, dep, uses)
        for inline, name, child in declared:
            here = os.path.dirname(f) if mod_rs else os.path.splitext(f)[0]
            d = os.path.join(here, *inline)
            for cand in (os.path.join(d, name + '.rs'), os.path.join(d, name, 'mod.rs')):
                if os.path.exists(cand) and cand not in self.files:
                    self.read(cand, child, cand.endswith('mod.rs'))
                    break

    @staticmethod
    def scope_at(scopes, pos):
        best = scopes[0]
        for s in scopes[1:]:
            if s[0] <= pos <= s[1] and s[0] >= best[0]:
                best = s
        return best

    # -- resolution: a path -> ('item', module, exact) | ('module', module) | ('glob', module) | None

    def resolve(self, scope, segs, seen=frozenset()):
        mods, i = self.mods, 1
        first = segs[0]
        if first in ('crate', '$crate'):
            m = ()
        elif first == 'self':
            m = scope
        elif first == 'super':
            m, i = scope, 0
            while i < len(segs) and segs[i] == 'super':
                if not m:
                    return None
                m, i = m[:-1], i + 1
        elif first == '::':
            return None  # an extern crate
        else:
            here = mods.get(scope)
            if here is None:
                return None
            if first in here.children:
                m = scope + (first,)
            elif first in here.bindings:
                key = (scope, first)
                if key in seen:
                    return None
                bscope, bsegs = here.bindings[first]
                return self.resolve(bscope, bsegs + segs[1:], seen | {key})
            elif first in here.items:
                return ('item', scope, True)
            else:
                return None  # std, an extern crate, the prelude, a generic
        while i < len(segs) and segs[i] in mods.get(m, Module(m, None)).children:
            if i == len(segs) - 1 and (segs[i] in mods[m].items or segs[i] in mods[m].bindings):
                break  # `use crate::device;` also imports the fn `device` lib.rs re-exports
            m, i = m + (segs[i],), i + 1
        if m not in mods:
            return None
        if i == len(segs):
            return ('module', m)
        name = segs[i]
        if name == '*':
            return ('glob', m)
        mod = mods[m]
        if name in mod.items:
            return ('item', m, True)
        if name in mod.bindings and (m, name) not in seen:
            bscope, bsegs = mod.bindings[name]
            return self.resolve(bscope, bsegs + segs[i + 1:], seen | {(m, name)})
        for gscope, gsegs in mod.globs:
            key = (m, '*', tuple(gsegs))
            if key in seen:
                continue
            r = self.resolve(gscope, gsegs[:-1] + segs[i:], seen | {key})
            if r and r[0] == 'item' and r[2]:
                return r
        if m == () and name in self.exported:
            return ('item', self.files[self.exported[name]][0], True)
        if not mod.macro_made:
            # `pub use vars::*` of names a macro makes in vars: the glob's module, not the facade
            for gscope, gsegs in mod.globs:
                key = (m, '*', tuple(gsegs))
                r = None if key in seen else self.resolve(gscope, gsegs[:-1] + segs[i:], seen | {key})
                if r and r[0] == 'item' and mods[r[1]].macro_made:
                    return r
        return ('item', m, False)  # not found (made by a macro): the module the path names

    def graph(self):
        """node -> {node: [line, ...]}"""
        edges = {self.node(f): {} for f in self.files}

        def add(f, target_mod, t, pos):
            tf = self.mods[target_mod].file
            if tf and tf != f:
                line = t.count('\n', 0, pos) + 1
                edges[self.node(f)].setdefault(self.node(tf), []).append(line)

        for f, (path, t, scopes, dep, uses) in self.files.items():
            for scope, segs, pos in uses:
                r = self.resolve(scope, segs)
                if r and r[0] in ('item', 'glob'):
                    add(f, r[1], t, pos)
            for m in re.finditer(r'(?<![\w$:])(\$crate|[A-Za-z_]\w*)((?:\s*::\s*[A-Za-z_]\w*)+)', t):
                segs = [m.group(1)] + re.findall(r'\w+', m.group(2))
                r = self.resolve(self.scope_at(scopes, m.start())[2], segs)
                if r and r[0] == 'item':
                    add(f, r[1], t, m.start())
        # macro_rules! in textual scope: visible in the defining file's module and below
        for f, names in self.macros.items():
            top = self.files[f][0]
            pat = re.compile(r'(?<![\w:])(' + '|'.join(map(re.escape, sorted(names))) + r')\s*!')
            for g, (path, t, *_rest) in self.files.items():
                if g != f and path[:len(top)] == top:
                    for m in pat.finditer(t):
                        add(g, top, t, m.start())
        return edges


def rust_crates(root):
    out = []
    srcs = sorted(glob.glob(os.path.join(root, 'crates', '*', 'src')))
    srcs += [s for s in [os.path.join(root, 'python', 'src')] if os.path.isdir(s)]
    for src in srcs:
        name = os.path.relpath(src, root) if src.startswith(os.path.join(root, 'python')) \
            else os.path.basename(os.path.dirname(src))
        roots = [r for r in ('lib.rs', 'main.rs') if os.path.exists(os.path.join(src, r))]
        for r in roots:
            label = name + (' (bin)' if r == 'main.rs' and len(roots) > 1 else '')
            out.append(Crate(label, src, os.path.join(src, r)))
    return out


# ---------------------------------------------------------------------------------------------
# Python packages


class Package:
    def __init__(self, label, pkg_dir):
        self.label, self.dir = label, pkg_dir
        self.name = os.path.basename(pkg_dir)
        self.files = {}  # dotted module name -> file
        for f in sorted(glob.glob(os.path.join(pkg_dir, '**', '*.py'), recursive=True)):
            rel = os.path.relpath(f, pkg_dir)[:-3].split(os.sep)
            if rel[-1] == '__init__':
                rel = rel[:-1]
            self.files['.'.join([self.name] + rel)] = f
        self.trees = {m: ast.parse(open(f, encoding='utf-8').read(), f) for m, f in self.files.items()}

    def node(self, mod):
        return os.path.relpath(self.files[mod], self.dir)[:-3]

    def is_package(self, mod):
        return self.files[mod].endswith('__init__.py')

    def reexport(self, pkg, name, seen=frozenset()):
        """The module that defines `name` as the package `pkg`'s __init__ binds it."""
        if (pkg, name) in seen:
            return pkg
        for node in self.trees[pkg].body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if (a.asname or a.name.split('.')[0]) == name:
                        mod = a.name if a.asname else a.name.split('.')[0]
                        return mod if mod in self.files else None
            if isinstance(node, ast.ImportFrom):
                base = self.base(pkg, node)
                for a in node.names:
                    if (a.asname or a.name) == name and base not in self.files:
                        return None  # bound from outside the package (`._native`, torch)
                    if (a.asname or a.name) == name:
                        sub = base + '.' + a.name
                        if sub in self.files:
                            return sub
                        if self.is_package(base):
                            return self.reexport(base, a.name, seen | {(pkg, name)})
                        return base
        return pkg

    def base(self, mod, node):
        if not node.level:
            return node.module or ''
        pkg = mod if self.is_package(mod) else mod.rsplit('.', 1)[0]
        parts = pkg.split('.')
        parts = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
        return '.'.join(parts + ([node.module] if node.module else []))

    def graph(self):
        edges = {self.node(m): {} for m in self.files}
        for mod, tree in self.trees.items():
            def add(target, line):
                if target in self.files and target != mod:
                    edges[self.node(mod)].setdefault(self.node(target), []).append(line)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        parts = a.name.split('.')
                        for k in range(len(parts), 0, -1):
                            if '.'.join(parts[:k]) in self.files:
                                add('.'.join(parts[:k]), node.lineno)
                                break
                elif isinstance(node, ast.ImportFrom):
                    base = self.base(mod, node)
                    if base not in self.files:
                        # `from ._native import X`: not a module of ours; maybe a deeper
                        # prefix is one (`from .sub.missing import X` -> sub)
                        parts = base.split('.')
                        for k in range(len(parts) - 1, 0, -1):
                            if '.'.join(parts[:k]) in self.files and len(parts[:k]) > 1:
                                add('.'.join(parts[:k]), node.lineno)
                                break
                        continue
                    for a in node.names:
                        sub = base + '.' + a.name
                        if sub in self.files:
                            add(sub, node.lineno)
                        elif a.name == '*' or not self.is_package(base):
                            add(base, node.lineno)
                        else:
                            target = self.reexport(base, a.name)
                            if target:
                                add(target, node.lineno)
        return edges


def python_packages(root):
    return [Package(os.path.relpath(os.path.dirname(f), root), os.path.dirname(f))
            for f in sorted(glob.glob(os.path.join(root, 'python', '*', '__init__.py')))]


# ---------------------------------------------------------------------------------------------


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('-')]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    listing = '-l' in sys.argv
    bad = False
    for unit in rust_crates(root) + python_packages(root):
        edges = unit.graph()
        graph = {a: set(bs) for a, bs in edges.items()}
        found = circles(graph)
        bad = bad or bool(found)
        print(f'## {unit.label}: {len(graph)} modules; import circles: '
              f'{"; ".join(" -> ".join(c) for c in found) if found else "none"}')
        if listing:
            ext = '.py' if isinstance(unit, Package) else '.rs'
            for a in sorted(edges):
                where = ', '.join(f'{b} ({a}{ext}:{",".join(map(str, sorted(set(ls))))})'
                                  for b, ls in sorted(edges[a].items()))
                print(f'   {a} -> {where or "-"}')
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main()
