#!/usr/bin/env python3
"""The final parameter digests of a matrix of runs, to show that a refactor changes no bit.

    cargo build --release -p phalanx-cli
    cargo build --release -p phalanx-learner --example mnist_learner
    python3 bench/digests.py --out before.json          # on the build before the change
    python3 bench/digests.py --out after.json --compare before.json   # … and after it

The matrix: the mlp (Adam, so that there is optimizer state to shard), the cnn and the
transformer, each under every sharding mode (`none`, `optimizer`, `grad`, `full`, `hybrid` on
4 ranks in 2 shard groups); `--fault-tolerance` (its unfused step and commit vote) under
`none` and `hybrid` (`full` refuses it: no rank holds a copy of another's shard); a sharded checkpoint written by 2 ranks and resumed by 3; and the burn-train
Learner example on 1 and on 2 ranks. Every rank of a run must print the same digest; `--compare`
exits 1 naming each run whose digest differs from the recorded one.

One run is not compared bit for bit: `--fault-tolerance` with rank 1 SIGKILLed mid-run. The two
survivors take the steps until the replacement joins without it, and how many depends on how
fast the replacement starts, so its digest differs between two runs of one build. It must
regroup, end with equal replicas on all 3 ranks, and reach the test accuracy of the run without
a kill less 0.02 (what crates/cli/tests/train_fault_tolerance.rs asserts); the script records
the accuracy.

`--phalanx` and `--learner` choose the binaries (default: target/release/…); `--only SUBSTR`
runs the runs whose names contain SUBSTR.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEADLINE_S = 600

# (name, phalanx train flags): each is run with --standalone --json.
MODES = ["none", "optimizer", "grad", "full", "hybrid"]


FT_FLAGS = ["--momentum", "0.9", "--fault-tolerance"]
KILLED = "mlp/fault-tolerance, rank 1 killed"


def train_runs():
    runs = [("mlp/fault-tolerance, none", FT_FLAGS + ["--nproc-per-node", "3", "--epochs", "5"]),
            ("mlp/fault-tolerance, hybrid", FT_FLAGS + ["--nproc-per-node", "4", "--epochs", "5",
                                                        "--sharding", "hybrid",
                                                        "--shard-group-size", "2"])]
    for mode in MODES:
        ranks = "4" if mode == "hybrid" else "2"
        extra = ["--shard-group-size", "2"] if mode == "hybrid" else []
        runs.append((f"mlp/{mode}", ["--nproc-per-node", ranks, "--optimizer", "adam",
                                     "--lr", "0.001", "--epochs", "2", "--sharding", mode] + extra))
        for model in ["cnn", "transformer"]:
            runs.append((f"{model}/{mode}", ["--nproc-per-node", ranks, "--model", model,
                                             "--dataset", "mnist5k", "--max-steps", "12",
                                             "--optimizer", "adamw", "--lr", "0.001",
                                             "--sharding", mode] + extra))
    return runs


def summaries(stdout, field="param_digest"):
    """(rank, field) of every --json summary line."""
    out = []
    for line in stdout.splitlines():
        at = line.find('{"event":"summary"')
        if at >= 0:
            j = json.loads(line[at:])
            out.append((j["rank"], j[field]))
    return sorted(out)


def one_digest(name, pairs, want_ranks):
    ranks = [r for r, _ in pairs]
    digests = {d for _, d in pairs}
    if ranks != list(range(want_ranks)) or len(digests) != 1:
        raise SystemExit(f"{name}: expected one equal digest from each of {want_ranks} ranks, "
                         f"got {pairs}")
    return digests.pop()


def run(cmd, name):
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S)
    if p.returncode != 0:
        raise SystemExit(f"{name}: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    print(f"  {name}: {time.monotonic() - t:.1f} s", file=sys.stderr)
    return p.stdout


def train(phalanx, flags, name):
    out = run([phalanx, "train", "--standalone", "--json"] + flags, name)
    ranks = int(flags[flags.index("--nproc-per-node") + 1])
    return one_digest(name, summaries(out), ranks)


def workers(launcher):
    """The launcher's children as {rank: pid}."""
    found = {}
    for task in os.listdir(f"/proc/{launcher}/task"):
        with open(f"/proc/{launcher}/task/{task}/children") as f:
            for pid in f.read().split():
                try:
                    env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                except OSError:
                    continue
                for kv in env:
                    if kv.startswith(b"RANK="):
                        found[int(kv[5:])] = int(pid)
    return found


def newest_step(d):
    """The newest committed checkpoint's step (`step-N.json`), or 0."""
    steps = [int(m.group(1)) for f in os.listdir(d) if (m := re.fullmatch(r"step-(\d+)\.json", f))]
    return max(steps, default=0)


def killed_rank(phalanx):
    """3 ranks under --fault-tolerance; rank 1 SIGKILLed once step 300 is checkpointed."""
    name = KILLED
    with tempfile.TemporaryDirectory() as d:
        cmd = [phalanx, "train", "--standalone", "--json"] + FT_FLAGS + [
               "--nproc-per-node", "3", "--epochs", "60", "--max-restarts", "1", "--checkpoint-every", "100",
               "--checkpoint-dir", d]
        t = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            while newest_step(d) < 300:
                if time.monotonic() - t > 120 or p.poll() is not None:
                    raise SystemExit(f"{name}: no checkpoint at step 300")
                time.sleep(0.01)
            os.kill(workers(p.pid)[1], signal.SIGKILL)
            out, err = p.communicate(timeout=DEADLINE_S)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        if p.returncode != 0 or "regrouped" not in out + err:
            raise SystemExit(f"{name}: exited {p.returncode}, regrouped: "
                             f"{'regrouped' in out + err}\n{out}\n{err}")
        print(f"  {name}: {time.monotonic() - t:.1f} s", file=sys.stderr)
        one_digest(name, summaries(out), 3)  # replicas equal
        accuracy = summaries(out, "test_accuracy")[0][1]
        return f"regrouped, replicas equal, test accuracy {accuracy:.4f}"


def resumed(phalanx):
    """A sharded checkpoint written by 2 ranks (epoch 1), resumed by 3 (epochs 2 and 3)."""
    name = "mlp/full, 2 ranks resumed by 3"
    with tempfile.TemporaryDirectory() as d:
        common = ["--optimizer", "adam", "--lr", "0.001", "--sharding", "full",
                  "--checkpoint-dir", d]
        train(phalanx, ["--nproc-per-node", "2", "--epochs", "1"] + common, name + " (first)")
        return train(phalanx, ["--nproc-per-node", "3", "--epochs", "3", "--resume"] + common,
                     name)


def learner(phalanx, example, ranks):
    name = f"learner/mnist_learner, {ranks} rank(s)"
    with tempfile.TemporaryDirectory() as d:
        args = [example, "--epochs", "1", "--artifact-dir", d]
        if ranks > 1:
            args = [phalanx, "launch", "--standalone", "--nproc-per-node", str(ranks), "--"] + args
        out = run(args, name)
    pairs = sorted((int(r), d) for r, d in re.findall(r"rank (\d+): parameter digest (\w+)", out))
    return one_digest(name, pairs, ranks)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phalanx", default=os.path.join(ROOT, "target/release/phalanx"))
    ap.add_argument("--learner", default=os.path.join(ROOT, "target/release/examples/mnist_learner"))
    ap.add_argument("--out", required=True, help="write the digests here (JSON)")
    ap.add_argument("--compare", help="digests recorded before (JSON): exit 1 on a difference")
    ap.add_argument("--only", default="", help="run only the runs whose names contain this")
    a = ap.parse_args()

    jobs = [(n, lambda f=f, n=n: train(a.phalanx, f, n)) for n, f in train_runs()]
    jobs += [(KILLED, lambda: killed_rank(a.phalanx)),
             ("mlp/full, 2 ranks resumed by 3", lambda: resumed(a.phalanx)),
             ("learner/mnist_learner, 1 rank(s)", lambda: learner(a.phalanx, a.learner, 1)),
             ("learner/mnist_learner, 2 rank(s)", lambda: learner(a.phalanx, a.learner, 2))]
    digests = {n: job() for n, job in jobs if a.only in n}
    if KILLED in digests:
        out = run([a.phalanx, "train", "--standalone", "--json"] + FT_FLAGS
                  + ["--nproc-per-node", "3", "--epochs", "60"], "undisturbed")
        undisturbed = summaries(out, "test_accuracy")[0][1]
        digests["mlp/fault-tolerance, undisturbed accuracy"] = f"{undisturbed:.4f}"
        # The undisturbed run's accuracy, less 0.02, is the bar (the docstring says why).
        got = float(digests[KILLED].rsplit(" ", 1)[1])
        if got < undisturbed - 0.02:
            raise SystemExit(f"{KILLED}: test accuracy {got} below {undisturbed - 0.02:.4f}")
    with open(a.out, "w") as f:
        json.dump(digests, f, indent=1, sort_keys=True)
    if not a.compare:
        print(f"{len(digests)} digests in {a.out}")
        return
    before = json.load(open(a.compare))
    differ = [n for n in digests if n != KILLED and before.get(n) != digests[n]]
    for n in digests:
        verdict = "RUN" if n == KILLED else "DIFFERS" if n in differ else "SAME"
        print(f"{verdict:8} {n}: {before.get(n)} -> {digests[n]}")

    if differ:
        raise SystemExit(f"{len(differ)} of {len(digests)} digests differ: {differ}")
    print(f"all {len(digests)} digests equal to {a.compare}")


if __name__ == "__main__":
    main()
