#!/usr/bin/env python3
"""Each test binary's wall time, read from `cargo test` output, slowest first.

    cargo test ... 2>&1 | tee LOG; python3 .ci/test_times.py LOG [CPU]

cargo prints `Running tests/x.rs (target/debug/deps/x-…)` before a binary and `test result: …
finished in 12.34s` after it; a binary's time is its own harness's figure, so what the phase
table shows beside it is the start-up and linking that no harness counts.

CPU, when given, is what .ci/test_runner wrote: each binary's wall time and the CPU time of it
and the processes it waited for. A binary that uses much less than the cores' worth of its wall
time waits (on processes, sockets, daemons, timeouts); one near it computes.
"""
import re
import sys


def binary_times(lines):
    """(name, seconds, passed) for each binary in `lines`, in run order."""
    out, name = [], None
    for line in lines:
        m = re.match(r"\s*(?:Running|Doc-tests)\s+(\S+)", line)
        if m:
            name = m.group(1)
            continue
        m = re.match(r"test result: \w+\. (\d+) passed.*finished in ([\d.]+)s", line)
        if m and name:
            out.append((name, float(m.group(2)), int(m.group(1))))
            name = None
    return out


def cpu_times(lines):
    """(name, wall, cpu) for each line `name wall user sys` of .ci/test_runner's file."""
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 4:
            try:
                wall, user, sys_ = (float(x) for x in parts[1:])
            except ValueError:
                continue
            out.append((parts[0], wall, user + sys_))
    return out


def main():
    with open(sys.argv[1], errors="replace") as f:
        times = binary_times(f)
    total = sum(t for _, t, _ in times)
    print(f"test binaries: {len(times)}, {total:.0f} s in their harnesses; the slowest:")
    for name, secs, passed in sorted(times, key=lambda x: -x[1])[:25]:
        print(f"  {secs:8.1f} s  {passed:4d} tests  {name}")
    if len(sys.argv) > 2 and sys.argv[2]:
        try:
            with open(sys.argv[2], errors="replace") as f:
                cpu = cpu_times(f)
        except OSError:
            return
        wall = sum(w for _, w, _ in cpu)
        used = sum(c for _, _, c in cpu)
        print(f"the test binaries (doctests aside) with their processes: {wall:.0f} s,"
              f" {used:.0f} CPU-s ({used / max(wall, 1e-9):.2f} cores busy on average);"
              " the slowest:")
        for name, w, c in sorted(cpu, key=lambda x: -x[1])[:25]:
            print(f"  {w:8.1f} s  {c:8.1f} CPU-s  {c / max(w, 1e-9):5.2f} cores  {name}")


if __name__ == "__main__":
    main()
