"""Rank 2 skips a collective: after five all_reduces every rank but 2 calls a sixth, and rank 2
calls the broadcast that comes next in its program. Every rank's collective fails
(PhalanxError), and with TORCH_FR_DUMP_TEMP_FILE set each writes its flight-recorder dump,
which crates/cli/tests/reliability_hang.rs reads with PyTorch's fr_trace and `phalanx
fr-trace`. Run on 3 ranks.
"""

import torch
import torch.distributed as dist

import phalanx_torch

dist.init_process_group("phalanx")
rank = dist.get_rank()
t = torch.ones(16)
for _ in range(5):
    dist.all_reduce(t)
try:
    if rank == 2:
        dist.broadcast(torch.zeros(16), src=0)
    else:
        dist.all_reduce(t)
    raise SystemExit(f"rank {rank}: the skipped collective went unnoticed")
except phalanx_torch.PhalanxError as e:
    print(f"rank {rank} caught: {e}", flush=True)
