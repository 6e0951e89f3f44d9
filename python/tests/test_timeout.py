"""A rank that stays away: the others' all_reduce raises PhalanxError after PHALANX_TIMEOUT
naming it (run with PHALANX_TIMEOUT=2s). Rank 1 sleeps, then exits 0 once the others caught it.
"""

import time

import torch
import torch.distributed as dist

import phalanx_torch

dist.init_process_group("phalanx")
rank = dist.get_rank()
dist.barrier()
if rank == 1:
    time.sleep(4)
    raise SystemExit(0)
start = time.monotonic()
try:
    dist.all_reduce(torch.ones(1000))
    raise SystemExit("all_reduce without rank 1 succeeded")
except phalanx_torch.PhalanxError as e:
    took = time.monotonic() - start
    assert "rank(s) [1]" in str(e), e
    assert took < 3.5, f"took {took:.1f} s"
    print(f"rank {rank} caught the timeout after {took:.1f} s: {e}", flush=True)
