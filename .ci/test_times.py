#!/usr/bin/env python3
"""Each test binary's wall time, read from `cargo test` output, slowest first.

    cargo test ... 2>&1 | tee LOG; python3 .ci/test_times.py LOG

cargo prints `Running tests/x.rs (target/debug/deps/x-…)` before a binary and `test result: …
finished in 12.34s` after it; a binary's time is its own harness's figure, so what the phase
table shows beside it is the start-up and linking that no harness counts.
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


def main():
    with open(sys.argv[1], errors="replace") as f:
        times = binary_times(f)
    total = sum(t for _, t, _ in times)
    print(f"test binaries: {len(times)}, {total:.0f} s in their harnesses; the slowest:")
    for name, secs, passed in sorted(times, key=lambda x: -x[1])[:25]:
        print(f"  {secs:8.1f} s  {passed:4d} tests  {name}")


if __name__ == "__main__":
    main()
