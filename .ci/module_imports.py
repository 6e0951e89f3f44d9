#!/usr/bin/env python3
"""Which modules of each crate import which, and whether they import each other in a circle.

STYLE: no import circle between the modules of a crate, of any length (a -> b -> a, or
a -> b -> c -> a; a folder's parent uses its children, never the reverse). This reads every
crate's top-level modules (for the CLI, the subcommand modules under cmd/) and resolves
`crate::module`, items re-exported by lib.rs/main.rs (`crate::Item`), nested use-groups and
`super::sibling`; the circles are the strongly connected components of that graph (Tarjan's
algorithm), each printed as one path around it.

    python3 .ci/module_imports.py [ROOT]   # one line per crate; exit 1 on a circle
    python3 .ci/module_imports.py -l       # also each module's imports
"""
import os,re,sys,glob
args=[a for a in sys.argv[1:] if not a.startswith('-')]
root=args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)),'..')
bad=False
listing='-l' in sys.argv
def balanced_names(t, prefix):
    """First path segments after each `prefix` occurrence, following nested use-groups."""
    out=[]
    for mm in re.finditer(re.escape(prefix),t):
        i=mm.end()
        if i<len(t) and t[i]=='{':
            depth=0; j=i; seg_start=i+1; names=[]
            while j<len(t):
                c=t[j]
                if c=='{': depth+=1
                elif c=='}':
                    depth-=1
                    if depth==0: break
                elif c==',' and depth==1:
                    names.append(t[seg_start:j]); seg_start=j+1
                j+=1
            names.append(t[seg_start:j])
            for n in names:
                n=n.strip()
                if n: out.append(re.split(r'::|\s',n)[0])
        else:
            m2=re.match(r'\w+',t[i:])
            if m2: out.append(m2.group(0))
    return out
def strip(t):
    t=re.sub(r'//[^\n]*','',t)
    return t
def circles(graph):
    """Each import circle of `graph` (module -> set of modules) as a closed path [a, b, ..., a],
    one per strongly connected component of two or more modules."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(path_around(graph, set(comp)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out
def path_around(graph, comp):
    """A closed path through the component that starts at its first module: a shortest way
    back to the start, found breadth first inside the component."""
    start = min(comp)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in prev:
                    prev[w] = v; nxt.append(w)
        frontier = nxt
    return [start, start]
def mods_of(src, base):
    """top-level module names -> files, where base is the folder whose children are 'modules'."""
    out={}
    for f in glob.glob(base+'/**/*.rs',recursive=True):
        rel=os.path.relpath(f,base)[:-3].split(os.sep)
        if rel in (['lib'],['main'],['mod']): continue
        out.setdefault(rel[0],[]).append(f)
    return out
def reexports(rootfile):
    m={}
    t=strip(open(rootfile).read())
    for mm in re.finditer(r'pub(?:\(crate\))? use (?:crate::|self::)?(\w+)::(\{[^}]*\}|[\w:]+)\s*;',t,re.S):
        mod=mm.group(1); items=mm.group(2)
        for it in re.findall(r'(\w+)(?:\s+as\s+(\w+))?',items.strip('{}')):
            name=it[1] or it[0]
            last=name.split('::')[-1]
            m[last]=mod
    return m
for crate in sorted(glob.glob(os.path.join(root,'crates/*/src'))):
    name=crate.split('/')[-2]
    rootfile=crate+'/lib.rs' if os.path.exists(crate+'/lib.rs') else crate+'/main.rs'
    levels=[(crate,'crate::',rootfile)]
    if os.path.isdir(crate+'/cmd'):
        levels=[(crate+'/cmd','crate::cmd::',crate+'/cmd/mod.rs')]
    for base,prefix,rf in levels:
        mods=mods_of(crate,base)
        rex=reexports(rf)
        graph={m:set() for m in mods}
        for m,files in mods.items():
            for f in files:
                t=strip(open(f).read())
                depth=len(os.path.relpath(f,base).split(os.sep))  # 1: base/x.rs ; 2: base/x/y.rs
                # crate-prefixed paths and use-groups
                for n in balanced_names(t,prefix):
                    if True:
                        if n in mods: graph[m].add(n)
                        elif n in rex and rex[n] in mods: graph[m].add(rex[n])
                # super:: from a top-level module file (base/x.rs or base/x/mod.rs) reaches siblings
                is_top = depth==1 or os.path.basename(f)=='mod.rs' and depth==2
                if is_top:
                    for n in [x for x in balanced_names(t,'super::') if x!='super']:
                        if True:
                            if n in mods: graph[m].add(n)
                            elif n in rex and rex[n] in mods: graph[m].add(rex[n])
                elif depth==2 or depth==3:
                    # a child's super::super:: reaches the top-level siblings
                    for mm in re.finditer(r'\bsuper::super::(\w+)',t):
                        n=mm.group(1)
                        if n in mods: graph[m].add(n)
            graph[m].discard(m)
        found=circles(graph)
        bad = bad or bool(found)
        label=name+('' if base==crate else ' (cmd)')
        print(f'## {label}: {len(mods)} modules; import circles: {"; ".join(" -> ".join(c) for c in found) if found else "none"}')
        if listing:
            for a in sorted(graph):
                print(f'   {a} -> {", ".join(sorted(graph[a])) or "-"}')
sys.exit(1 if bad else 0)
