#!/usr/bin/env python3
"""Checks Note [Host crates unoptimised] (Cargo.toml): the packages `[profile.dev.package]`
compiles at opt-level 0 must be host crates only (proc macros, build scripts and what only they
use). One that is also a dependency of a program (a library, test, example or binary of the
workspace, in any feature set CI builds) would run unoptimised in it, and the tests would slow
down without failing; this names it instead.

The program side comes from `cargo tree -e normal,dev,no-proc-macro`: a package reached
without passing through a proc macro is linked into a program. Build-script edges are not
followed (`-e` without `build`). Usage: host_profile.py [Cargo.toml] (the repository's by
default); it runs cargo in that file's folder.
"""
import os, re, subprocess, sys

# Every feature a CI build turns on (.ci/run: the main build, and the cuda lint with CI_CUDA=1).
FEATURES = "phalanx-pg/mpi,phalanx-pg/nccl,phalanx-cli/mpi,phalanx-cli/nccl,phalanx-cli/cuda"


def unoptimised(manifest_text):
    """The package names `[profile.dev.package]` sets to opt-level 0, one per line
    `name = { opt-level = 0, ... }`; "*" and other tables are not read."""
    names, inside = [], False
    for line in manifest_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            inside = stripped == "[profile.dev.package]"
            continue
        m = re.match(r'^"?([A-Za-z0-9_-]+)"?\s*=\s*\{(.*)\}\s*$', stripped) if inside else None
        if m and re.search(r"opt-level\s*=\s*0\b", m.group(2)):
            names.append(m.group(1))
    return names


def program_packages(folder, features=FEATURES):
    """Names of the packages a program of the workspace links, from `cargo tree`. A proc macro
    of the workspace's is not a member (crates/host-features), so it is no root here."""
    cmd = ["cargo", "tree", "--workspace", "--locked", "-e", "normal,dev,no-proc-macro",
           "--prefix", "none", "-f", "{p}"] + (["--features", features] if features else [])
    out = subprocess.run(cmd, cwd=folder, check=True, capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def problems(listed, programs):
    return [f"Cargo.toml: `{name}` is compiled at opt-level 0 (Note [Host crates unoptimised]) "
            f"but a program of the workspace links it; take it out of [profile.dev.package]"
            for name in listed if name in programs]


def main(argv, features=FEATURES):
    manifest = os.path.abspath(argv[1] if len(argv) > 1 else
                               os.path.join(os.path.dirname(__file__), "..", "Cargo.toml"))
    folder = os.path.dirname(manifest)
    with open(manifest) as f:
        listed = unoptimised(f.read())
    found = problems(listed, program_packages(folder, features))
    for p in found:
        print(p, file=sys.stderr)
    if found:
        return 1
    print(f"Cargo.toml: {len(listed)} host-only packages at opt-level 0, none linked into a program")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
