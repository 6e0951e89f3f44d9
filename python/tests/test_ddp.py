"""DistributedDataParallel over the "phalanx" backend equals training on the whole batch in one
process: each rank trains its shard with DDP, and also replays the same steps locally on the
concatenated batch; after every step the two sets of parameters agree. Prints one "ok" line.
"""

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import phalanx_torch  # noqa: F401

dist.init_process_group("phalanx")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
reference = copy.deepcopy(model)
# Rank 0's weights win at construction (DDP broadcasts them): perturb the others first.
with torch.no_grad():
    for p in model.parameters():
        p.add_(rank)
ddp = DDP(model, bucket_cap_mb=0.001)  # several buckets
opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.MSELoss()
g = torch.Generator().manual_seed(1)
for step in range(10):
    x = torch.randn(world * 8, 16, generator=g)
    y = torch.randn(world * 8, 4, generator=g)
    opt.zero_grad()
    loss_fn(ddp(x[rank * 8 : (rank + 1) * 8]), y[rank * 8 : (rank + 1) * 8]).backward()
    opt.step()
    ref_opt.zero_grad()
    loss_fn(reference(x), y).backward()
    ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        err = (p - q).abs().max().item()
        assert err < 1e-5, f"step {step}: {name} differs from the whole-batch reference by {err}"
# Replicas are identical across ranks, bit for bit.
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
every = [torch.empty_like(flat) for _ in range(world)]
dist.all_gather(every, flat)
assert all(torch.equal(every[0], e) for e in every), "replicas differ"
print(f"rank {rank} of {world}: ddp over phalanx ok", flush=True)
dist.destroy_process_group()
