"""Failures surface as PhalanxError naming the rank at fault, never a silent hang:
1. ranks that call different collectives (rank 1 broadcasts while the others all_reduce) all
   fail at once, each naming both sides;
2. a rank that stays away (rank 1 sleeps) makes the others' all_reduce fail after
   PHALANX_TIMEOUT naming rank 1 (run with PHALANX_TIMEOUT=2s).
Every rank prints what it caught and exits 0.
"""


import torch
import torch.distributed as dist

import phalanx_torch

dist.init_process_group("phalanx")
rank = dist.get_rank()
dist.barrier()
try:
    t = torch.ones(1000)
    if rank == 1:
        dist.broadcast(t, src=0)
    else:
        dist.all_reduce(t)
    raise SystemExit("a mismatched collective succeeded")
except phalanx_torch.PhalanxError as e:
    assert "mismatch" in str(e) and "rank 1" in str(e), e
    print(f"rank {rank} caught the mismatch: {e}", flush=True)
