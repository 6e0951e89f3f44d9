"""phalanx_torch.diloco.DiLoCo with ``fault_tolerance=True`` under ``phalanx launch
--fault-tolerance``: every rank an island of its own (an MLP on data/digits.csv.gz, AdamW
inside, DiLoCo's Nesterov SGD outside, a sync every ``--sync-every`` inner steps), and rank 1
SIGKILLed between two syncs in its first life (``--kill-at K``: before inner step K).

The other islands notice it at their next sync, re-form without it and redo that sync over the
islands left (Note [Islands that come and go] in phalanx_torch/diloco.py); the replacement
joins at a later sync with the global parameters, the outer optimizer's state and the inner
step count from a peer; after the last sync every island holds the same parameters. With
``--fragments F`` the model syncs in F fragments, one every ``--sync-every / F`` inner steps
(Streaming DiLoCo without overlap), and with ``--bf16`` the pseudo-gradients travel in
bfloat16. What fault tolerance cannot do (islands of several ranks, a fragment's sync
overlapped with the inner steps) is refused with a ValueError naming it.

Every rank prints one ``result`` line (slot, syncs, islands at the end, test accuracy, a digest
of its parameters), its recoveries (kind, generation, members, seconds), and, on the
survivors, when their first sync after the kill completed. While an island is missing each
inner step waits 0.1 s, so that the replacement (which imports torch first) joins before the
run ends. With ``--join-in-sync`` the survivors instead hold the sync after the kill until the
replacement asked to join, so that they re-form with it and it takes part in that sync.
"""

import argparse
import hashlib
import os
import signal
import sys
import time

import torch
import torch.nn as nn

import phalanx_torch  # noqa: F401  (registers "phalanx")
from digits import TEST, TRAIN, X, Y
from phalanx_torch.diloco import DiLoCo

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=150, help="inner steps")
ap.add_argument("--sync-every", type=int, default=5)
ap.add_argument("--kill-at", type=int, default=0)
ap.add_argument("--fragments", type=int, default=None)
ap.add_argument("--bf16", action="store_true", help="bfloat16 between islands")
ap.add_argument("--join-in-sync", action="store_true",
                help="the survivors hold their next sync until the replacement asked to join "
                     "(generation 2 recorded: its death, then its join), so that it joins in "
                     "the middle of that sync")
a = ap.parse_args()

first_life = os.environ.get("PHALANX_FT_REPLACEMENT") != "1"
slots = int(os.environ["WORLD_SIZE"])

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
inner = torch.optim.AdamW(model.parameters(), lr=3e-3)
outer = torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True)
# What fault tolerance cannot do is refused before anything is sent.
for bad, words in [(dict(island_size=2), "island_size=2 with fault_tolerance"),
                   (dict(fragments=2, fragment_sync_delay=1),
                    "fragment_sync_delay=1 with fault_tolerance")]:
    try:
        DiLoCo(model, inner, outer, sync_every=10, fault_tolerance=True, **bad)
        raise AssertionError(f"{bad} accepted")
    except ValueError as e:
        assert words in str(e), e
diloco = DiLoCo(model, inner, outer, sync_every=a.sync_every, fault_tolerance=True,
                fragments=a.fragments,
                outer_dtype=torch.bfloat16 if a.bf16 else torch.float32)
# One fragment's sync every `cadence` inner steps.
cadence = a.sync_every // (a.fragments or 1)
manager = diloco.manager
if manager.finished:
    sys.exit(0)
slot = manager.slot
order = torch.randperm(TRAIN.stop, generator=torch.Generator().manual_seed(1 + slot))
killed_at = None
while diloco.steps < a.steps:
    step = diloco.steps
    if a.kill_at and step == a.kill_at and slot == 1 and first_life:
        print(f"kill at {time.time():.6f}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if a.kill_at and step > a.kill_at and manager.world_size < slots:
        time.sleep(0.1)
    if (a.join_in_sync and first_life and killed_at is None and step > a.kill_at
            and (step + 1) % cadence == 0):
        while manager.newest_generation() < 2:
            time.sleep(0.05)
    at = (step * 32) % (TRAIN.stop - 32)
    idx = order[at:at + 32]
    inner.zero_grad()
    nn.functional.cross_entropy(model(X[idx]), Y[idx]).backward()
    syncs = diloco.syncs
    inner.step()
    if (a.kill_at and killed_at is None and diloco.syncs > syncs
            and any(r["kind"] == "regrouped" for r in manager.recoveries)):
        killed_at = time.time()
        print(f"first sync after the failure done at {killed_at:.6f}", flush=True)
diloco.sync()
manager.finish()
for r in manager.recoveries:
    if r["kind"] != "started":
        print(f"recovery {r['kind']} generation {r['generation']} members {r['members']} "
              f"at sync {r['step']} took {r['seconds']:.3f} s", flush=True)
with torch.no_grad():
    accuracy = (model(X[TEST]).argmax(1) == Y[TEST]).float().mean().item()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
print(f"result slot {slot} syncs {diloco.syncs} islands {manager.world_size} "
      f"accuracy {accuracy:.4f} digest {digest}", flush=True)
