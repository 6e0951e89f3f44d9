"""PyTorch's own test modules (files from pytorch/pytorch's test/ tree, which the wheel does not
ship) run twice: as PyTorch ships them (gloo on CPU) and with backend phalanx put where they
pick gloo. A manual tool: CI cannot reach GitHub, so docs/pytorch.md says which files, at which
commit, and what they gave.

    python run_torch_modules.py /tmp/torch-tests/test/distributed/test_device_mesh.py ...
    python run_torch_modules.py --backend phalanx --pattern 'test_from_group.*' FILE.py

Every module runs in its own process group with a deadline (`--module-timeout`; its count
line then says so, and the tests it did not reach are in no count) and every test has its own
(`--test-timeout`); whatever of the group is left when the module ends is killed. Prints one
line per test and backend (`PASS`, `FAIL`, `SKIP` with its reason), a count per module and
backend, and last the tests that pass with gloo and fail with phalanx; exits 1 when there is
one. `--json FILE` writes the outcomes.

Note [Substituting the backend]: the modules' base classes (DTensorTestBase, FSDPTest,
MultiProcessTestCase) check the backend's name against a list of PyTorch's own ("Backend
phalanx not supported!") and test it (`if self.backend == "gloo"`), so the name they hold
stays "gloo"; the substitution is one layer down, in `init_process_group`/`new_group`, which
receive "phalanx" where they are given "gloo" (also inside "cpu:gloo,cuda:nccl"). The
default backend for "cpu" (`Backend.default_device_backend_map`) stays gloo: the base classes
read it for the name they check; a group created without a backend takes WORLD's.
The ranks are forked (as in run_torch_suite.py; PyTorch spawns them, which re-imports torch
for every rank of every test).
"""

import argparse
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

OUTCOME = re.compile(r"^(PASS|FAIL|SKIP) (\S+)(.*)$")
ERROR_LINE = re.compile(r"^\s*[\w.]*(Error|Exception|Timeout)\b.*:")


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("modules", nargs="+", help="test module files (.py)")
    p.add_argument("--backend", choices=("both", "gloo", "phalanx"), default="both")
    p.add_argument("--pattern", default=".", help="regex the test ids must match (re.search)")
    p.add_argument("--test-timeout", type=int, default=120, help="seconds per test")
    p.add_argument("--module-timeout", type=int, default=600, help="seconds per module run")
    p.add_argument("--json", help="write the outcomes here")
    p.add_argument(
        "--fsdp-on-cpu",
        action="store_true",
        help="start FSDPTest's ranks on a CPU-only machine, under both backends (Note [FSDPTest "
        "on CPU])",
    )
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def main():
    args = parse()
    if args.one:
        return run_module(args)
    backends = ("gloo", "phalanx") if args.backend == "both" else (args.backend,)
    # outcomes[module][backend] = {test: (outcome, detail)}
    outcomes = {}
    summary = []
    for path in args.modules:
        name = os.path.splitext(os.path.basename(path))[0]
        outcomes[name] = {}
        for backend in backends:
            got, note = run_child(path, backend, args)
            outcomes[name][backend] = got
            counts = {o: sum(1 for v in got.values() if v[0] == o) for o in OUTCOME_NAMES}
            line = (
                f"module {name} {backend}: {counts['PASS']} passed, {counts['FAIL']} failed, "
                f"{counts['SKIP']} skipped{note}"
            )
            print(line, flush=True)
            summary.append(line)
    regressions = []
    if len(backends) == 2:
        for name, by in outcomes.items():
            for test, (outcome, _) in sorted(by["gloo"].items()):
                if outcome == "PASS" and by["phalanx"].get(test, ("NOT RUN",))[0] != "PASS":
                    regressions.append(f"{name}.{test}")
    print("\n".join(["", *summary]), flush=True)
    if len(backends) == 2:
        print(f"pass with gloo, not with phalanx: {len(regressions)}", flush=True)
        for r in regressions:
            print(f"  {r}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"outcomes": outcomes, "regressions": regressions}, f, indent=1)
    return 1 if regressions else 0


OUTCOME_NAMES = ("PASS", "FAIL", "SKIP")


def run_child(path, backend, args):
    """One module on one backend in a process group of its own, under the module deadline;
    returns ({test: (outcome, detail)}, a note on how it ended)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--one", "--backend", backend]
    cmd += ["--pattern", args.pattern, "--test-timeout", str(args.test_timeout), path]
    cmd += ["--fsdp-on-cpu"] if args.fsdp_on_cpu else []
    started = time.monotonic()
    child = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=os.path.dirname(os.path.abspath(path)),
    )
    got = {}
    deadline_hit = False

    def on_deadline(*_):
        nonlocal deadline_hit
        deadline_hit = True
        # The whole group: the module's ranks are the child's children.
        os.killpg(child.pid, signal.SIGKILL)

    signal.signal(signal.SIGALRM, on_deadline)
    signal.alarm(args.module_timeout)
    try:
        for line in child.stdout:
            m = OUTCOME.match(line.rstrip("\n"))
            if m:
                got[m.group(2)] = (m.group(1), m.group(3).strip())
                print(f"[{backend}] {line}", end="", flush=True)
            elif line.startswith("module-error"):
                print(f"[{backend}] {line}", end="", flush=True)
                got["<import>"] = ("FAIL", line)
        child.wait()
    finally:
        signal.alarm(0)
        # Ranks that outlived their test (a rank hung past the test's deadline) end here.
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    took = time.monotonic() - started
    note = f" ({took:.0f} s)"
    if deadline_hit:
        note = f" (deadline of {args.module_timeout} s hit after {len(got)} tests)"
    elif child.returncode not in (0, 1):
        note += f" (runner exited {child.returncode})"
    return got, note


# Note [Substituting the backend]
def substitute_phalanx():
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    import phalanx_torch  # noqa: F401 - registers the backend

    def swap(backend):
        if isinstance(backend, str) and "gloo" in backend:
            return backend.replace("gloo", "phalanx")
        return backend

    def wrap(fn, at):
        # `at`: the backend's position: init_process_group(backend, ...),
        # new_group(ranks, timeout, backend, ...).
        def wrapper(*a, **kw):
            if "backend" in kw:
                kw["backend"] = swap(kw["backend"])
            elif len(a) > at:
                a = (*a[:at], swap(a[at]), *a[at + 1 :])
            return fn(*a, **kw)

        wrapper.__wrapped__ = fn
        return wrapper

    for name, at in (("init_process_group", 0), ("new_group", 2)):
        patched = wrap(getattr(c10d, name), at)
        setattr(c10d, name, patched)
        setattr(dist, name, patched)


def run_module(args):
    path, pattern, test_timeout = args.modules[0], args.pattern, args.test_timeout
    os.environ["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(test_timeout)
    os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="phalanx-modules-"))
    if args.backend == "phalanx":
        substitute_phalanx()
    import torch
    from torch.testing._internal import common_distributed

    common_distributed.TIMEOUT_DEFAULT = test_timeout
    if args.fsdp_on_cpu:
        # Note [FSDPTest on CPU]: torch 2.15's FSDPTest._run exits "Need at least N accelerator
        # devices" on a CPU-only machine before the test starts, even for the tests marked
        # skip_if_lt_x_gpu(..., allow_cpu=True); FSDPTestMixin._run, shipped beside it, is the
        # same method with the exception for CPU that the newer test modules expect.
        from torch.testing._internal import common_fsdp

        common_fsdp.FSDPTest._run = common_fsdp.FSDPTestMixin.__dict__["_run"]

    def fork_ranks(self):
        self._start_processes(torch.multiprocessing.get_context("fork").Process)

    common_distributed.MultiProcessTestCase._spawn_processes = fork_ranks

    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    name = os.path.splitext(os.path.basename(path))[0]
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except Exception as e:  # the module's own imports: the wheel lacks what it names
        print(f"module-error {name}: {type(e).__name__}: {e}", flush=True)
        return 2
    chosen = [
        t
        for t in _flatten(unittest.defaultTestLoader.loadTestsFromModule(module))
        if re.search(pattern, _short(t))
    ]
    # The tests whose ranks are processes first: a test that runs in this process (ranks as
    # threads: MultiThreadedTestCase, FSDPTestMultiThread) starts autograd's threads, after
    # which a forked rank's backward raises "Unable to handle autograd's threading in
    # combination with fork-based multiprocessing".
    forked = common_distributed.MultiProcessTestCase
    chosen.sort(key=lambda t: not isinstance(t, forked))
    tests = unittest.TestSuite(chosen)
    result = _Result()
    tests.run(result)
    return 1 if result.failed else 0


def _flatten(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _flatten(t)
        else:
            yield t


def _short(test):
    """Class.test_name: the module's name is the file's."""
    return ".".join(test.id().split(".")[-2:])


class _Result(unittest.TestResult):
    """Prints a line per test as it ends (the parent reads them)."""

    def __init__(self):
        super().__init__()
        self.failed = []

    def _say(self, test, what, detail=""):
        print(f"{what} {_short(test)}{detail}", flush=True)

    def addSuccess(self, test):
        self._say(test, "PASS")

    def addSkip(self, test, reason):
        self._say(test, "SKIP", f" ({reason.strip().splitlines()[0]})" if reason else "")

    def addFailure(self, test, err):
        self.failed.append(_short(test))
        text = self._exc_info_to_string(err, test)
        # One line: the last exception a rank raised (the ranks' tracebacks are long).
        errors = [l for l in text.splitlines() if ERROR_LINE.search(l)]
        self._say(test, "FAIL", f" ({errors[-1].strip() if errors else text.strip()[-300:]})")

    addError = addFailure

    def addExpectedFailure(self, test, err):
        self._say(test, "PASS", " (expected failure)")

    def addUnexpectedSuccess(self, test):
        self.failed.append(_short(test))
        self._say(test, "FAIL", " (unexpected success)")


if __name__ == "__main__":
    sys.exit(main())
