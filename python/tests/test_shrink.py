"""`dist.shrink_group` over backend "phalanx" (torch 2.15): on 3 ranks rank 2 leaves (it exits
without a word, as a dead rank would), ranks 0 and 1 shrink the default group to themselves and
all_reduce over it; the shrunk group is named, sized and ranked as c10d says. Prints one "ok"
line per rank left.
"""

import os

import torch
import torch.distributed as dist

import phalanx_torch  # noqa: F401

dist.init_process_group("phalanx")
rank = dist.get_rank()
t = torch.ones(4)
dist.all_reduce(t)
assert t.tolist() == [3.0] * 4, t
if rank == 2:
    os._exit(0)
old = dist.group.WORLD.group_name
small = dist.shrink_group([2])
assert dist.get_world_size() == 2 and dist.get_rank() == rank, (dist.get_world_size(), rank)
assert small is dist.group.WORLD and small.group_name != old, (small.group_name, old)
t = torch.full((4,), float(rank + 1))
dist.all_reduce(t)
assert t.tolist() == [3.0] * 4, t
print(f"rank {rank}: shrink_group over phalanx ok (group {small.group_name}, size "
      f"{small.size()})", flush=True)
dist.destroy_process_group()
