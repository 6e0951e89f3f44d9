#!/usr/bin/env python3
"""The slowest units of a cargo build, read from the report `cargo ... --timings` writes.

    cargo test --no-run --timings ...; python3 .ci/build_times.py target/cargo-timings/cargo-timing.html

Each unit is one rustc (or build script) run: a crate's library, a test binary, a build
script, and its figure is the wall time it ran. Units run side by side (two at a time on 2
cores), so a unit's time is longer than alone, and the sum is about the build's core-seconds
when the cores are busy. The build is most of a cold CI run, and this says where it goes:
dependencies, the workspace's libraries, or its test binaries.
"""
import json
import re
import sys


def units(html):
    """(seconds, package, target) of each unit the report lists."""
    m = re.search(r"const UNIT_DATA = (\[.*?\]);", html, re.S)
    if not m:
        raise SystemExit("no UNIT_DATA in the report: not a cargo --timings report?")
    return [(u["duration"], u["name"], u["target"].strip()) for u in json.loads(m.group(1))]


def main():
    with open(sys.argv[1], errors="replace") as f:
        rows = units(f.read())
    total = sum(s for s, _, _ in rows)
    tests = sum(s for s, _, t in rows if "(test)" in t or '"example"' in t)
    print(f"build units: {len(rows)}, {total:.0f} s summed; test and example binaries"
          f" (unit tests included) {tests:.0f} s; the slowest:")
    for secs, name, target in sorted(rows, key=lambda r: -r[0])[:20]:
        print(f"  {secs:8.1f} s  {name} {target}")


if __name__ == "__main__":
    main()
