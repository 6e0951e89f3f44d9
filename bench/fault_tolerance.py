#!/usr/bin/env python3
"""What a SIGKILLed rank costs: `--fault-tolerance` next to `--max-restarts` (torchrun's way:
stop everyone, restart everyone, resume from the newest checkpoint), interleaved in one run.

Each round runs the same training four times: per mode once undisturbed and once with rank 1
SIGKILLed when the checkpoint at step KILL_AT is committed. Lost time = wall time with the kill
minus wall time without it, same mode, same round. For fault tolerance also the time from the
kill to the first step completed after it (the survivors' "process group re-formed" line).
Prints every run and the medians.

Usage: bench/fault_tolerance.py [--rounds 3] [--kill-at 300] [--every 100] [-- TRAIN FLAGS]
Default training: 2 ranks, MLP 512 wide on mnist5k, batch 32, momentum 0.9, 6 epochs.
"""
import argparse
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
TRAIN = ["--nproc-per-node", "2", "--dataset", "mnist5k", "--hidden", "512", "--epochs", "6",
         "--batch-size", "32", "--momentum", "0.9"]


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


def run(binary, flags, kill_at):
    """Wall seconds, and with a kill: seconds from the kill to the first regrouped line."""
    ck = tempfile.mkdtemp(prefix="phalanx-ft-bench.")
    cmd = [binary, "train", "--standalone", "--checkpoint-dir", ck] + flags
    begin = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []

    def read():
        for line in p.stderr:
            lines.append((time.monotonic(), line.rstrip()))

    t = threading.Thread(target=read)
    t.start()
    killed = None
    if kill_at:
        while newest_step(ck) < kill_at:
            if p.poll() is not None:
                sys.exit(f"finished before step {kill_at}: {cmd}")
            time.sleep(0.002)
        victim = [pid for pid, r in workers(p.pid) if r == 1][0]
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
    code = p.wait()
    wall = time.monotonic() - begin
    t.join()
    shutil.rmtree(ck, ignore_errors=True)
    if code != 0:
        sys.exit(f"exit {code}: {' '.join(cmd)}\n" + "\n".join(l for _, l in lines[-20:]))
    regrouped = next((at - killed for at, l in lines
                      if killed and "process group re-formed" in l and "after the failure" in l),
                     None)
    return wall, regrouped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kill-at", type=int, default=300)
    ap.add_argument("--every", type=int, default=100, help="--checkpoint-every")
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
    back = []
    for r in range(a.rounds):
        for mode, flags in modes.items():
            base, _ = run(binary, flags, 0)
            hit, regrouped = run(binary, flags, a.kill_at)
            lost[mode].append(hit - base)
            if regrouped is not None:
                back.append(regrouped)
            print(f"round {r + 1} {mode:16} undisturbed {base:6.2f} s  killed {hit:6.2f} s  "
                  f"lost {hit - base:5.2f} s" +
                  (f"  kill -> next step {regrouped:.3f} s" if regrouped is not None else ""),
                  flush=True)
    ft, rs = st.median(lost["fault-tolerance"]), st.median(lost["max-restarts"])
    print(f"median lost: fault tolerance {ft:.2f} s, max-restarts {rs:.2f} s "
          f"({rs / max(ft, 1e-3):.1f}x); kill -> next step (fault tolerance) "
          f"{st.median(back):.3f} s")


if __name__ == "__main__":
    main()
