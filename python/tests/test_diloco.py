"""phalanx_torch.diloco.DiLoCo on 4 ranks in 2 islands of 2 under `phalanx launch`, over the
backend given as the first argument (`phalanx` or `gloo`), tried as a torchft user writes it:
DDP over the island's group, AdamW inside, the outer optimizer a torch optimizer.

- Local SGD (`SGD(lr=1)`): after a sync, every rank holds the mean of the islands' parameters
  (in bfloat16 between islands: within bf16's rounding of it).
- DiLoCo (`SGD(lr=0.7, momentum=0.9, nesterov=True)`), 12 steps, a sync every 4: every rank of
  every island ends with the same parameters, printed as a digest (the Rust test compares it
  across ranks and with gloo's: 2 islands, and a sum of two values does not depend on its
  order). One fragment is DiLoCo bit for bit; Streaming DiLoCo in 2 fragments (an int, or
  torchft's list of modules) with a delay of 1 syncs a fragment every 2 steps, overlapped, and
  ends equal everywhere too (its parameters are in the digest).
- Bad arguments raise ValueError naming them, before any collective.

Prints `diloco ok digest <hex>` on every rank.
"""

import hashlib
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import phalanx_torch  # noqa: F401 - registers "phalanx"
from phalanx_torch.diloco import DiLoCo

backend = sys.argv[1] if len(sys.argv) > 1 else "phalanx"
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 4, world


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def flat(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def batch(step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def train(m, inner, steps):
    ddp = DDP(m, process_group=DILOCO.island_group)
    for step in range(steps):
        x, y = batch(step)
        inner.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        inner.step()


for bad, words in [(dict(sync_every=0), "sync_every=0"), (dict(sync_every=4, island_size=3), "island of 3"),
                   (dict(sync_every=4, fragments=3), "not a multiple of the 3 fragments"),
                   (dict(sync_every=4, fragments=2, fragment_sync_delay=2), "fragment_sync_delay=2"),
                   (dict(sync_every=4, fragments=2, fragment_update_alpha=2.0), "fragment_update_alpha=2.0"),
                   (dict(sync_every=4, fragments=9), "fragments=9")]:
    m = model()
    try:
        DiLoCo(m, torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(m.parameters(), lr=1.0), **bad)
        raise AssertionError(f"{bad} accepted")
    except ValueError as e:
        assert words in str(e), e

# Local SGD: the mean of the islands.
m = model()
inner = torch.optim.AdamW(m.parameters(), lr=1e-2)
DILOCO = DiLoCo(m, inner, torch.optim.SGD(m.parameters(), lr=1.0), sync_every=1000, island_size=2)
train(m, inner, 3)
before = flat(m).clone()
mean = before.clone()
dist.all_reduce(mean)
mean /= world
others = before.clone()
dist.all_reduce(others, op=dist.ReduceOp.MAX)
assert not torch.equal(before, others), "the islands should differ before the sync"
DILOCO.sync()
err = (flat(m) - mean).abs().max().item()
assert err < 1e-6, f"local SGD: {err} from the islands' mean"
DILOCO.close()

# Local SGD with bfloat16 pseudo-gradients between islands: the mean to bf16's rounding of the
# islands' drifts (at most 2^-8 of each, twice: the islands' and the sum's).
m = model()
inner = torch.optim.AdamW(m.parameters(), lr=1e-2)
DILOCO = DiLoCo(m, inner, torch.optim.SGD(m.parameters(), lr=1.0), sync_every=1000,
                island_size=2, outer_dtype=torch.bfloat16)
start = flat(m).clone()
train(m, inner, 3)
before = flat(m).clone()
mean = before.clone()
dist.all_reduce(mean)
mean /= world
DILOCO.sync()
err = (flat(m) - mean).abs().max().item()
bound = 2 * (before - start).abs().max().item() / 256 + 1e-6
assert 0 < err <= bound, f"bf16 local SGD: {err} from the islands' mean, bound {bound}"
low, high = flat(m).clone(), flat(m).clone()
dist.all_reduce(low, op=dist.ReduceOp.MIN)
dist.all_reduce(high, op=dist.ReduceOp.MAX)
assert torch.equal(low, high), "bf16: the islands differ after the sync"
DILOCO.close()



def diloco(steps, **kw):
    """DiLoCo's Nesterov outer steps over `steps` inner steps and a sync at the end: every rank
    ends equal. Returns the parameters and the syncs."""
    global DILOCO
    m = model()
    inner = torch.optim.AdamW(m.parameters(), lr=1e-2)
    outer = torch.optim.SGD(m.parameters(), lr=0.7, momentum=0.9, nesterov=True)
    if callable(kw.get("fragments")):
        kw["fragments"] = kw["fragments"](m)
    DILOCO = DiLoCo(m, inner, outer, sync_every=4, island_size=2, **kw)
    train(m, inner, steps)
    DILOCO.sync()
    DILOCO.close()
    mine = flat(m)
    low, high = mine.clone(), mine.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    assert torch.equal(low, high), f"{kw}: the islands differ after the last sync"
    return mine, DILOCO.syncs


plain, syncs = diloco(12)
assert syncs == 3, f"{syncs}: the last step's sync leaves nothing apart"
# One fragment without delay is DiLoCo, bit for bit.
same, _ = diloco(12, fragments=1)
assert torch.equal(same, plain), "fragments=1 differs from DiLoCo"
# Streaming: 2 fragments (the first weight, then the rest), one synced every 2 steps with a
# delay of 1 and half the islands' progress kept: 6 fragment syncs, then 2 at the end.
streaming, syncs = diloco(12, fragments=2, fragment_sync_delay=1, fragment_update_alpha=0.5)
assert syncs == 6 + 2, syncs
assert not torch.equal(streaming, plain)
# torchft's model_fragments: a list of modules.
_, syncs = diloco(12, fragments=lambda m: [m[0], m[2]], fragment_sync_delay=1)
assert syncs == 6 + 1, f"{syncs}: the fragment synced on the last step is not apart"
digest = hashlib.sha256(torch.cat([plain, streaming]).numpy().tobytes()).hexdigest()
print(f"diloco ok digest {digest}", flush=True)
dist.destroy_process_group()
