#!/usr/bin/env python3
"""What a node that arrives mid-run costs the running one, under `--nnodes 1:2`: admitted into the
running round (`--fault-tolerance`, Note [Node admission]) next to the next round (without it:
everyone stops, and the new round resumes from the newest checkpoint, as torchrun's elastic
agent does), interleaved in one run.

Node 0 trains alone (one rank) on this machine; node 1, the same command with --node-rank 1,
starts half a checkpoint interval after the checkpoint at step ARRIVE_AT is committed. Both
modes then train the rest of the epoch on two ranks, so the time from the arrival to the end of
the job differs by what the arrival cost. For the admission also the running rank's pause (its
"process group re-formed ... completed X s after the change" line) and how long node 1 took
from its start to its first step with node 0.

Usage: bench/elastic_arrival.py [--rounds 3] [--arrive-at 100] [--every 50] [-- TRAIN FLAGS]
Default training: the big MLP (2 hidden layers of 2048), batch 64, momentum 0.9, one epoch of
synthetic:20000.
"""
import argparse
import os
import re
import shutil
import socket
import statistics as st
import subprocess
import sys
import tempfile
import threading
import time

from fault_tolerance import HERE, newest_step

TRAIN = ["--dataset", "synthetic:20000", "--hidden", "2048", "--depth", "2", "--epochs", "1",
         "--batch-size", "64", "--momentum", "0.9"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(binary, flags, node, lines):
    # A multi-node job needs its secret on every node.
    env = {**os.environ, "PHALANX_TOKEN": os.environ.get("PHALANX_TOKEN", "bench-" + "0" * 32)}
    p = subprocess.Popen([binary, "train", "--node-rank", str(node)] + flags,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)

    def read():
        for line in p.stderr:
            lines.append((time.monotonic(), line.rstrip()))

    t = threading.Thread(target=read)
    t.start()
    return p, t


def run(binary, flags, arrive_at, every):
    """Seconds from node 1's start to the job's end; node 0's pause for the admission and node
    1's start to its first step with node 0 (admission only)."""
    ck = tempfile.mkdtemp(prefix="phalanx-arrival-bench.")
    flags = flags + ["--nnodes", "1:2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
                     "--master-port", str(free_port()), "--rdzv-last-call", "0.01",
                     "--checkpoint-dir", ck, "--checkpoint-every", str(every)]
    lines0, lines1 = [], []
    p0, t0 = start(binary, flags, 0, lines0)
    seen, arrive_when, arrived, p1 = {}, None, None, None
    while p0.poll() is None:
        now = time.monotonic()
        n = newest_step(ck)
        if n not in seen:
            seen[n] = now
            if n == arrive_at and arrive_at - every in seen:
                # Half a checkpoint interval on: a new round redoes that much on average.
                arrive_when = now + (now - seen[arrive_at - every]) / 2
        if arrive_when and p1 is None and now >= arrive_when:
            arrived = time.monotonic()
            p1, t1 = start(binary, flags, 1, lines1)
        time.sleep(0.002)
    ended = time.monotonic()
    t0.join()
    if p1 is not None:
        p1.wait()
        t1.join()
    shutil.rmtree(ck, ignore_errors=True)
    for p, lines in ((p0, lines0), (p1, lines1)):
        if p is None or p.returncode != 0:
            sys.exit(f"exit {p and p.returncode}: {flags}\n" + "\n".join(l for _, l in lines[-20:]))
    pause = next((float(m.group(1)) for _, l in lines0
                  if (m := re.search(r"rank 0: generation \d+: .* completed ([0-9.]+) s after", l))),
                 None)
    joined = next((at - arrived for at, l in lines1 if "process group re-formed" in l), None)
    restarted = any("ending round 0" in l for _, l in lines0)
    return ended - arrived, pause, joined, restarted


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arrive-at", type=int, default=100)
    ap.add_argument("--every", type=int, default=50, help="--checkpoint-every")
    ap.add_argument("train", nargs="*", default=TRAIN)
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "phalanx-cli", "--manifest-path",
                    f"{HERE}/Cargo.toml"], check=True)
    binary = f"{HERE}/target/release/phalanx"
    modes = {
        "admitted": a.train + ["--fault-tolerance", "--max-restarts", "1"],
        "next round": a.train + ["--resume"],
    }
    rest = {m: [] for m in modes}
    pauses, joins = [], []
    for r in range(a.rounds):
        for mode, flags in modes.items():
            after, pause, joined, restarted = run(binary, flags, a.arrive_at, a.every)
            rest[mode].append(after)
            if pause is not None:
                pauses.append(pause)
                joins.append(joined)
            print(f"round {r + 1} {mode:10}: arrival -> end {after:6.2f} s" +
                  (f"  node 0 paused {pause:.3f} s, node 1 start -> first step with node 0 "
                   f"{joined:.2f} s" if pause is not None else "") +
                  ("  (everyone restarted)" if restarted else ""), flush=True)
    adm, nxt = st.median(rest["admitted"]), st.median(rest["next round"])
    print(f"medians: arrival -> end {adm:.2f} s admitted, {nxt:.2f} s next round "
          f"(+{nxt - adm:.2f} s); admitted: node 0 paused {st.median(pauses):.3f} s, node 1 "
          f"start -> first step {st.median(joins):.2f} s")


if __name__ == "__main__":
    main()
