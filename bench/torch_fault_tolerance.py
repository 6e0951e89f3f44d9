#!/usr/bin/env python3
"""What a SIGKILLed rank costs a PyTorch data-parallel job, three ways, interleaved in one run,
on the same script (python/tests/test_ft.py: an MLP on the digits, Adam, a fixed global batch
per step and `--step-time` seconds of simulated work a step):

- `phalanx_torch.ft` under `phalanx launch --fault-tolerance --max-restarts 1` (the survivors
  re-form the group and go on; a replacement joins and takes a peer's state);
- plain DDP over backend phalanx under `phalanx launch --max-restarts 1` (everyone restarts and
  resumes from the newest checkpoint, written every `--every` steps);
- the same plain DDP under `torchrun --max-restarts 1 --monitor-interval 0.1`.

Each round runs every mode once undisturbed and once with rank 1 SIGKILLed before step
`--kill-at` (by default half a checkpoint interval after a checkpoint: a restart's average
redo). Lost time: the killed run's wall time minus the undisturbed run's, same mode, same
round. For the API also the time from the kill to the survivors' next completed step, and what
the replacement's join cost them (the boundary where they hand it the state); for a restart the
time from the kill to the restarted group's first step.

Usage: bench/torch_fault_tolerance.py [--rounds 3] [--nproc 3] [--steps 600] [--kill-at 150]
                                      [--every 100] [--step-time 0.02] [--phalanx PATH]
Needs target/release/phalanx (cargo build --release -p phalanx-cli) or --phalanx, torch and phalanx_torch
in $ANCHORS_VENV or ~/.cache/phalanx-anchors.
"""
import argparse
import os
import re
import shutil
import statistics as st
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(HERE, "python", "tests", "test_ft.py")


def command(mode, a, venv, ckpt, kill):
    py = f"{venv}/bin/python"
    work = ["--steps", str(a.steps), "--step-time", str(a.step_time)]
    if kill:
        work += ["--kill-at", str(a.kill_at)]
    plain = ["plain", "--ckpt", ckpt, "--ckpt-every", str(a.every)] + work
    phalanx = [a.phalanx, "launch", "--standalone",
               "--nproc-per-node", str(a.nproc), "--max-restarts", "1"]
    if mode == "phalanx_torch.ft":
        return phalanx + ["--fault-tolerance", SCRIPT, "api"] + work
    if mode == "phalanx launch restart":
        return phalanx + [SCRIPT] + plain
    return [f"{venv}/bin/torchrun", "--standalone", f"--nproc_per_node={a.nproc}",
            "--max-restarts=1", "--monitor-interval=0.1", SCRIPT] + plain


def run(mode, a, venv, kill):
    """Wall seconds, and the output lines (stdout and stderr)."""
    ckpt = tempfile.mkdtemp(prefix="phalanx-torch-ft-bench.")
    cmd = command(mode, a, venv, ckpt, kill)
    env = {**os.environ, "PHALANX_PYTHON": f"{venv}/bin/python", "OMP_NUM_THREADS": "1",
           "PHALANX_TIMEOUT": "60s"}
    start = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - start
    shutil.rmtree(ckpt, ignore_errors=True)
    if p.returncode != 0:
        sys.exit(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    # torchrun's workers share its stdout unprefixed: lines may run together.
    results = re.findall(r"result slot \d+", p.stdout)
    # A replacement that finds the run over exits with nothing to do (no result line).
    if len(results) < a.nproc - (kill and mode == "phalanx_torch.ft"):
        sys.exit(f"{len(results)} result lines from {' '.join(cmd)}:\n{p.stdout}\n{p.stderr}")
    return wall, p.stdout.splitlines()


def stamp(lines, what):
    return [float(m.group(1)) for l in lines if (m := re.search(what + r" ([0-9.]+)$", l))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=3)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--kill-at", type=int, default=150)
    ap.add_argument("--every", type=int, default=100, help="plain modes: checkpoint every")
    ap.add_argument("--step-time", type=float, default=0.02)
    ap.add_argument("--phalanx", default=os.path.join(HERE, "target", "release", "phalanx"),
                    help="the phalanx binary")
    ap.add_argument("--modes", default="phalanx_torch.ft,phalanx launch restart,torchrun restart",
                    help="which of the three, comma-separated")
    a = ap.parse_args()
    venv = os.environ.get("ANCHORS_VENV", os.path.expanduser("~/.cache/phalanx-anchors"))
    modes = a.modes.split(",")
    lost = {m: [] for m in modes}
    back, joins, restarts = [], [], {}
    for r in range(a.rounds):
        for mode in modes:
            base, _ = run(mode, a, venv, False)
            hit, lines = run(mode, a, venv, True)
            lost[mode].append(hit - base)
            extra = ""
            if mode == "phalanx_torch.ft":
                kill = stamp(lines, "kill at")[0]
                nxt = max(stamp(lines, "first step after the failure done at")) - kill
                back.append(nxt)
                join = [float(m.group(1)) for l in lines
                        if "recovery advanced" in l and (m := re.search(r"took ([0-9.]+) s", l))]
                if join:
                    joins.append(max(join))
                extra = f"  kill -> survivors' next step {nxt:.3f} s, " + \
                    (f"join took {max(join):.3f} s" if join else "the replacement came too late")
            else:
                kill, again = stamp(lines, "kill at"), stamp(lines, "first step after the restart done at")
                if kill and again:
                    restarts.setdefault(mode, []).append(max(again) - kill[0])
                    extra = f"  kill -> first step of the restarted group {restarts[mode][-1]:.2f} s"
            print(f"round {r + 1} {mode:24} undisturbed {base:6.2f} s  killed {hit:6.2f} s  "
                  f"lost {hit - base:5.2f} s{extra}", flush=True)
    print("medians:")
    for mode in modes:
        print(f"  {mode:24} lost {st.median(lost[mode]):5.2f} s per kill "
              f"({min(lost[mode]):.2f}-{max(lost[mode]):.2f})" +
              (f"; kill -> first step restarted {st.median(restarts[mode]):.2f} s"
               if mode in restarts else ""))
    if back:
        print(f"  phalanx_torch.ft: kill -> survivors' next step {st.median(back):.3f} s "
              f"({min(back):.3f}-{max(back):.3f}); the replacement's join cost the others "
              f"{st.median(joins) if joins else float('nan'):.3f} s ({len(joins)} of {len(back)} "
              "joined before the end)")


if __name__ == "__main__":
    main()
