"""dist.all_reduce through any torch.distributed backend, nccl-tests conventions: for each size
(bytes of the float32 buffer), WARMUP untimed calls, then ITERS timed ones each after a barrier,
the time of a call the max over ranks, the median reported; busbw = size / t * 2(n-1)/n.

Run: phalanx launch --standalone --nproc-per-node 2 python/bench/allreduce.py --backend phalanx
     (or torchrun …; --backend gloo for the comparison). Rank 0 prints one JSON line per size.
"""
import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--backend", default="phalanx")
p.add_argument("--sizes", default="4K,16K,64K,256K,1M,4M,16M,64M")
p.add_argument("--iters", type=int, default=30)
p.add_argument("--warmup", type=int, default=5)
a = p.parse_args()
if a.backend == "phalanx":
    import phalanx_torch  # noqa: F401
dist.init_process_group(a.backend)
rank, n = dist.get_rank(), dist.get_world_size()


def parse(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


for size in map(parse, a.sizes.split(",")):
    t = torch.ones(size // 4)
    for _ in range(a.warmup):
        dist.all_reduce(t)
    times = []
    for _ in range(a.iters):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        times.append(dt.item())
    med = statistics.median(times)
    if rank == 0:
        busbw = size / med * 2 * (n - 1) / n / 1e9
        print(json.dumps({"backend": a.backend, "world": n, "bytes": size, "time_us": med * 1e6,
                          "busbw_GBps": busbw}), flush=True)
dist.destroy_process_group()
