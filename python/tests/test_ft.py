"""A PyTorch data-parallel loop (an MLP on data/digits.csv.gz, Adam) whose rank 1 can be
SIGKILLed mid-run, in two shapes:

- ``api``: through phalanx_torch.ft (Manager + OptimizerWrapper), for
  ``phalanx launch --fault-tolerance``: the survivors re-form the group and redo the step, the
  replacement joins at a step boundary and takes a peer's state over the transport.
- ``plain``: ordinary ``init_process_group("phalanx")`` + DistributedDataParallel, with a
  checkpoint every ``--ckpt-every`` steps in ``--ckpt`` (resumed from on a restart), for
  ``phalanx launch --max-restarts`` or ``torchrun --max-restarts``: a death restarts the group.

``--kill-at K``: rank 1 (``--kill-rank R``: rank R) SIGKILLs itself before step K in its first
life (it prints the time first); with ``--kill-node``, its agent first, as when its whole node
is lost. ``--hold-for-join``: after the first step after the kill, steps wait 0.25 s each while the
group is short (60 s over 240 steps), so a replacement (which needs seconds to import torch,
more while CI builds beside the tests) joins before the run ends. Every rank prints
one ``result`` line (slot, step, loss, test accuracy, a digest of its model and optimizer
state, its world size); survivors print when their first step after the failure completed;
slot 0 prints the undisturbed run's accuracy (the same steps on the whole batch, in process).
The global batch of every step is fixed; a rank's share is decided by its slot.
"""

import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import phalanx_torch  # noqa: F401  (registers "phalanx")
from digits import TEST, TRAIN, X, Y
from phalanx_torch import ft

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=["api", "plain"])
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--kill-at", type=int, default=0)
ap.add_argument("--kill-rank", type=int, default=1)
ap.add_argument("--hold-for-join", action="store_true")
ap.add_argument("--kill-node", action="store_true",
                help="with --kill-at: SIGKILL this rank's agent first, its whole node lost")
ap.add_argument("--batch", type=int, default=96, help="global batch")
ap.add_argument("--ckpt", default=None)
ap.add_argument("--ckpt-every", type=int, default=50)
ap.add_argument("--step-time", type=float, default=0.0, help="seconds of simulated work a step")
a = ap.parse_args()


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
first_life = os.environ.get("PHALANX_FT_REPLACEMENT") != "1" and \
    os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
order = torch.randperm(TRAIN.stop, generator=torch.Generator().manual_seed(1))


def batch(step, slot, slots):
    """Slot `slot`'s share of step `step`'s global batch."""
    at = (step * a.batch) % (TRAIN.stop - a.batch)
    idx = order[at:at + a.batch][slot::slots]
    return X[idx], Y[idx]


def maybe_die(step, rank):
    if a.kill_at and step == a.kill_at and rank == a.kill_rank and first_life:
        print(f"kill at {time.time():.6f}", flush=True)
        if a.kill_node:
            os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def accuracy(m):
    with torch.no_grad():
        return (m(X[TEST]).argmax(1) == Y[TEST]).float().mean().item()


def undisturbed():
    """The undisturbed run's test accuracy: the same steps on the whole global batch in one
    process (what data parallelism over equal shards computes, up to rounding)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    o = torch.optim.Adam(m.parameters(), lr=3e-3)
    for step in range(a.steps):
        x, y = batch(step, 0, 1)
        o.zero_grad()
        loss_fn(m(x), y).backward()
        o.step()
    return accuracy(m)


loss_fn = nn.CrossEntropyLoss()
if a.mode == "api":
    manager = ft.Manager(model, opt)
    if manager.finished:
        sys.exit(0)
    opt = ft.OptimizerWrapper(manager, opt)
    slot, slots = manager.slot, int(os.environ["WORLD_SIZE"])
    failed = False
    while manager.step < a.steps:
        step = manager.step
        maybe_die(step, slot)
        # The first step after the failure is timed by the test: it does not wait.
        if (a.hold_for_join and a.kill_at and step >= a.kill_at and not failed
                and manager.world_size < slots):
            time.sleep(0.25)
        time.sleep(a.step_time)
        x, y = batch(step, slot, slots)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        if not opt.step():
            failed = True
            continue
        if failed:
            failed = False
            print(f"first step after the failure done at {time.time():.6f}", flush=True)
    manager.finish()
    for r in manager.recoveries:
        if r["kind"] != "started":
            print(f"recovery {r['kind']} generation {r['generation']} members {r['members']} "
                  f"source {r['source']} at step {r['step']} took {r['seconds']:.3f} s", flush=True)
    world, raw = manager.world_size, opt.optimizer
else:
    dist.init_process_group("phalanx")
    slot, slots = dist.get_rank(), dist.get_world_size()
    ddp = nn.parallel.DistributedDataParallel(model)
    start = 0
    path = a.ckpt and os.path.join(a.ckpt, "state.pt")
    if path and os.path.exists(path):
        state = torch.load(path, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
    for step in range(start, a.steps):
        maybe_die(step, slot)
        time.sleep(a.step_time)
        x, y = batch(step, slot, slots)
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        if step == start and not first_life:
            print(f"first step after the restart done at {time.time():.6f}", flush=True)
        if path and slot == 0 and (step + 1) % a.ckpt_every == 0:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "step": step + 1}, path + ".tmp")
            os.replace(path + ".tmp", path)
    world, raw = slots, opt
    dist.destroy_process_group()

if slot == 0:
    print(f"undisturbed accuracy {undisturbed():.4f}", flush=True)
print(f"result slot {slot} step {a.steps} loss {loss.item():.4f} accuracy {accuracy(model):.4f} "
      f"digest {ft.state_digest(model, raw)} world {world} "
      f"restart {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", flush=True)
