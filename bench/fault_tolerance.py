#!/usr/bin/env python3
"""What a SIGKILLed rank costs: `--fault-tolerance` next to `--max-restarts` (torchrun's way:
stop everyone, restart everyone, resume from the newest checkpoint), interleaved in one run.

Each round runs the same training four times: per mode once undisturbed and once with rank 1
SIGKILLed half a checkpoint interval after the checkpoint at step KILL_AT is committed (the
average case for a restart, which redoes the steps since the newest checkpoint). Lost time: how
much longer the checkpoint interval with the kill took than without it, same mode, same round
(the whole run's wall time would bury it in noise). Under fault tolerance the steps without the
dead rank carry less data each (the ranks alive share it), so there its cost is what the two
regroups took (each from the change to the first step after it). For fault tolerance also the time from the
kill to the first step completed after it (the survivors' "process group re-formed" line) and
how many steps they took before the replacement joined (steps whose rank-1 share of the data
was not trained).
Prints every run and the medians.

Usage: bench/fault_tolerance.py [--rounds 3] [--kill-at 150] [--every 50] [--torchrun]
                                [-- TRAIN FLAGS]
--torchrun also measures torchrun's own restart of a PyTorch DDP job (../shared/anchors, its
venv in $ANCHORS_VENV or ~/.cache/phalanx-anchors).
Default training: 2 ranks, the big MLP (2 hidden layers of 2048), batch 64, momentum 0.9,
one epoch of synthetic:60000 (375 steps: no epoch-end checkpoint before the kill).
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics as st
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = ["--nproc-per-node", "2", "--dataset", "synthetic:60000", "--hidden", "2048", "--depth", "2",
         "--epochs", "1", "--batch-size", "64", "--momentum", "0.9"]


def workers(launcher):
    """(pid, RANK) of the launcher's children."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != launcher:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            out.append((int(pid), int(env[b"RANK"])))
        except (OSError, KeyError, ValueError, IndexError):
            pass
    return out


def newest_step(d):
    steps = [int(m.group(1)) for n in os.listdir(d) if (m := re.fullmatch(r"step-(\d+)\.json", n))]
    return max(steps, default=0)


def run(binary, flags, kill_at, every):
    """When each checkpoint step was first committed, and with a kill: seconds from the kill to
    the first regrouped line (fault tolerance)."""
    ck = tempfile.mkdtemp(prefix="phalanx-ft-bench.")
    cmd = [binary, "train", "--standalone", "--checkpoint-dir", ck] + flags
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []

    def read():
        for line in p.stderr:
            lines.append((time.monotonic(), line.rstrip()))

    t = threading.Thread(target=read)
    t.start()
    seen, killed, kill_when = {}, None, None
    while p.poll() is None:
        now = time.monotonic()
        n = newest_step(ck)
        if n not in seen:
            seen[n] = now
            if kill_at and n == kill_at and kill_at - every in seen:
                # Half a checkpoint interval on: a restart redoes that much on average.
                kill_when = now + (now - seen[kill_at - every]) / 2
        if kill_when and not killed and now >= kill_when:
            victim = [pid for pid, r in workers(p.pid) if r == 1][0]
            killed = time.monotonic()
            os.kill(victim, signal.SIGKILL)
        time.sleep(0.002)
    t.join()
    shutil.rmtree(ck, ignore_errors=True)
    if p.returncode != 0:
        sys.exit(f"exit {p.returncode}: {' '.join(cmd)}\n" + "\n".join(l for _, l in lines[-20:]))
    if kill_at and not killed:
        sys.exit(f"no checkpoint at steps {kill_at - every} and {kill_at}: {cmd}")
    regrouped = next((at - killed for at, l in lines
                      if killed and at > killed and "process group re-formed" in l
                      and "after the change" in l),
                     None)
    # Steps the others took without the dead rank: from the first regroup to the one that
    # took its replacement in (rank 0's lines).
    steps = [int(m.group(1)) for _, l in lines
             if "phalanx train: rank 0: generation" in l
             and (m := re.search(r"step (\d+) completed", l))]
    # What each regroup took, from the change to the first step after it (rank 0).
    costs = [float(m.group(1)) for _, l in lines
             if "phalanx train: rank 0: generation" in l
             and (m := re.search(r"completed ([0-9.]+) s after", l))]
    return seen, regrouped, (steps[-1] - steps[0] if len(steps) >= 2 else 0, costs)


def torchrun_restart(venv, script, kill_after):
    """torchrun's restart cost for a PyTorch DDP job (the anchors' torch_ddp.py, 2 ranks):
    seconds from SIGKILLing rank 1 to the restarted job's first step (its workers' spawn plus
    their own start-up, which torch_ddp.py reports as first_step_s)."""
    cmd = [f"{venv}/bin/torchrun", "--standalone", "--nproc_per_node=2", "--max-restarts=1",
           "--monitor-interval=0.1", script, "--steps", "100000"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    begin = time.monotonic()
    while len(workers(p.pid)) < 2:
        time.sleep(0.01)
    first = {pid for pid, _ in workers(p.pid)}
    time.sleep(max(0.0, kill_after - (time.monotonic() - begin)))
    victim = [pid for pid, r in workers(p.pid) if r == 1][0]
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    while not (new := [pid for pid, _ in workers(p.pid) if pid not in first]):
        if p.poll() is not None:
            sys.exit("torchrun ended instead of restarting")
        time.sleep(0.005)
    spawned = time.monotonic() - killed
    # The restarted job runs its 100,000 steps: end it once its first step must be past and
    # read first_step_s from a short second run instead (same start-up, same machine).
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
    probe = subprocess.run([f"{venv}/bin/torchrun", "--standalone", "--nproc_per_node=2", script,
                            "--steps", "1", "--warmup", "0"], capture_output=True, text=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    line = next(l for l in probe.stdout.splitlines() if l.startswith("{"))
    return spawned, json.loads(line)["first_step_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kill-at", type=int, default=150)
    ap.add_argument("--every", type=int, default=50, help="--checkpoint-every")
    ap.add_argument("--torchrun", action="store_true",
                    help="also measure torchrun's restart of a PyTorch DDP job (anchors venv)")
    ap.add_argument("train", nargs="*", default=TRAIN)
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "phalanx-cli", "--manifest-path",
                    f"{HERE}/Cargo.toml"], check=True)
    binary = f"{HERE}/target/release/phalanx"
    common = a.train + ["--checkpoint-every", str(a.every)]
    modes = {
        "fault-tolerance": common + ["--fault-tolerance", "--max-restarts", "1"],
        "max-restarts": common + ["--max-restarts", "1", "--resume"],
    }
    lost = {m: [] for m in modes}
    back, regroups = [], []
    # The kill's cost: how much later the first checkpoint after it lands than without it.
    span = (a.kill_at, a.kill_at + a.every)
    for r in range(a.rounds):
        for mode, flags in modes.items():
            base, _, _ = run(binary, flags, 0, a.every)
            hit, regrouped, (without, costs) = run(binary, flags, a.kill_at, a.every)
            b, h = base[span[1]] - base[span[0]], hit[span[1]] - hit[span[0]]
            lost[mode].append(h - b)
            if regrouped is not None:
                back.append(regrouped)
                regroups.append(sum(costs))
            print(f"round {r + 1} {mode:16} steps {span[0]}-{span[1]}: undisturbed {b:6.2f} s  "
                  f"killed {h:6.2f} s  lost {h - b:5.2f} s" +
                  (f"  kill -> next step {regrouped:.3f} s, regroups took "
                   f"{' + '.join(f'{c:.2f}' for c in costs)} s, {without} steps without rank 1"
                   if regrouped is not None else ""),
                  flush=True)
    if a.torchrun:
        venv = os.environ.get("ANCHORS_VENV", os.path.expanduser("~/.cache/phalanx-anchors"))
        script = os.path.join(HERE, "..", "shared", "anchors", "ddp", "torch_ddp.py")
        runs = [torchrun_restart(venv, script, 8.0) for _ in range(a.rounds)]
        for spawned, first in runs:
            print(f"torchrun (PyTorch DDP, gloo): kill -> new workers {spawned:.2f} s, their start "
                  f"to first step {first:.2f} s: restart cost {spawned + first:.2f} s plus the "
                  "steps since the last checkpoint", flush=True)
    # Under fault tolerance the interval's steps are not the same work (the ranks alive share
    # each step's data), so its cost is what the regroups took, not the interval's length.
    ft, rs = st.median(regroups), st.median(lost["max-restarts"])
    print(f"medians: max-restarts lost {rs:.2f} s; fault tolerance: kill -> next step "
          f"{st.median(back):.3f} s, regroups {ft:.2f} s in all ({rs / max(ft, 1e-3):.1f}x less)")


if __name__ == "__main__":
    main()
