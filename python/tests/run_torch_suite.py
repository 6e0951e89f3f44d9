"""PyTorch's own backend suite (`torch.testing._internal.distributed.distributed_test`) on one
backend: its collective and point-to-point tests, each on WORLD_SIZE fresh processes.

    python run_torch_suite.py --backend phalanx --world-size 3
    python run_torch_suite.py --backend gloo --world-size 3 --pattern 'test_send_recv.*'

Prints one line per test (`PASS`, `FAIL`, `SKIP` with its reason) and last a summary line:

    suite phalanx world_size=3: 120 passed, 0 failed, 54 skipped (174 tests, 95.1 s)

and exits 1 when a test failed. A backend outside PyTorch (phalanx) is declared as PyTorch's
own harness expects of a plugin (`DistTestCases.backend_feature["plugin"]`, "subgroup"). The
ranks are forked from this process (PyTorch's suite spawns them, which re-imports torch for
every rank of every test: about 3x slower here); each test has a deadline (`--test-timeout`).
"""

import argparse
import os
import re
import sys
import tempfile
import time
import unittest

# Which of the suite's tests run: the collectives and point-to-point ones (their CUDA and NCCL
# variants skip on a CPU backend, as they do for Gloo).
SELECTION = (
    r"test_(all_reduce|broadcast|reduce|all_gather|gather|scatter|all_to_all|reduce_scatter"
    r"|barrier|send|recv|isend|irecv|batch_isend|sparse_all_reduce|coalescing|new_subgroups"
    r"|get_backend|get_rank|destroy)"
)


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", required=True, help="gloo, or phalanx (imports phalanx_torch)")
    p.add_argument("--world-size", type=int, default=3)
    p.add_argument("--pattern", default=SELECTION, help="regex the test names must match")
    p.add_argument("--test-timeout", type=int, default=60, help="seconds per test")
    p.add_argument(
        "--selected-as",
        metavar="BACKEND",
        help="choose the tests as for this backend (the suite's skips test the backend's name "
        "when it is imported: --backend phalanx --selected-as gloo runs on phalanx every test "
        "Gloo runs, its gloo-only ones included)",
    )
    return p.parse_args()


def main():
    args = parse()
    # distributed_test reads these at import.
    os.environ["BACKEND"] = args.selected_as or args.backend
    os.environ["WORLD_SIZE"] = str(args.world_size)
    os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="phalanx-suite-"))
    os.environ["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(args.test_timeout)

    import torch
    from torch.testing._internal import common_distributed
    from torch.testing._internal.common_distributed import DistTestCases
    from torch.testing._internal.distributed import distributed_test as suite

    if args.backend == "phalanx":
        import phalanx_torch  # noqa: F401 - registers the backend

        for feature in ("plugin", "subgroup"):
            DistTestCases.backend_feature[feature].add("phalanx")
    common_distributed.TIMEOUT_DEFAULT = args.test_timeout
    # The tests (and their processes' init_process_group) read the module's name at run time.
    suite.BACKEND = args.backend

    class Suite(suite.TestDistBackend, suite.DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            self._start_processes(torch.multiprocessing.get_context("fork").Process)

    names = sorted(
        n for n in dir(suite.DistributedTest._DistTestBase) if re.match(args.pattern, n)
    )
    tests = unittest.TestSuite(Suite(n) for n in names)
    started = time.monotonic()
    result = _Result()
    tests.run(result)
    took = time.monotonic() - started
    chosen = f" (tests chosen as for {args.selected_as})" if args.selected_as else ""
    print(
        f"suite {args.backend}{chosen} world_size={args.world_size}: {result.passed} passed, "
        f"{len(result.failed)} failed, {result.skipped} skipped ({len(names)} tests, {took:.1f} s)",
        flush=True,
    )
    for name in result.failed:
        print(f"failed: {name}", flush=True)
    return 1 if result.failed else 0


class _Result(unittest.TestResult):
    """Counts, and prints a line per test as it ends."""

    def __init__(self):
        super().__init__()
        self.passed = 0
        self.skipped = 0
        self.failed = []

    def _say(self, test, what, detail=""):
        print(f"{what} {test.id().split('.')[-1]}{detail}", flush=True)

    def addSuccess(self, test):
        self.passed += 1
        self._say(test, "PASS")

    def addSkip(self, test, reason):
        self.skipped += 1
        self._say(test, "SKIP", f" ({reason.strip().splitlines()[0]})" if reason else "")

    def addFailure(self, test, err):
        self.failed.append(test.id().split(".")[-1])
        self._say(test, "FAIL", "\n" + self._exc_info_to_string(err, test))

    addError = addFailure


if __name__ == "__main__":
    sys.exit(main())
