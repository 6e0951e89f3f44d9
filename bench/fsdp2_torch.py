"""PyTorch's FSDP2 (and DDP) on CPU: the model `phalanx bench train` measures, the same step,
for the sharding comparison of docs/sharding.md.

Model: the MLP 784-H x D-10 (ReLU between), Adam lr 1e-3 (or SGD lr 0.01), batch B per rank,
fixed synthetic batches (as `phalanx bench train`: data loading is not measured).
--mode fsdp2: `fully_shard` on every Linear, then on the root (FSDP2's recipe);
--mode ddp: DistributedDataParallel. --reshard-after-forward 0|1 (FSDP2's default 1).

Run: torchrun --nproc_per_node=4 bench/fsdp2_torch.py --hidden 4096 --depth 7 --steps 3
     [--backend gloo|phalanx] [--mode fsdp2|ddp]
Prints one JSON line from rank 0: samples/s, step ms, peak RSS (max over ranks, VmHWM, MiB),
and the training state per rank (parameters, gradients, optimizer state; MiB, max over ranks).
"""
import argparse, json, os, time

import torch
import torch.distributed as dist
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--hidden", type=int, default=2048)
p.add_argument("--depth", type=int, default=2)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--optimizer", default="adam", choices=["adam", "sgd"])
p.add_argument("--mode", default="fsdp2", choices=["fsdp2", "ddp"])
p.add_argument("--reshard-after-forward", type=int, default=1)
p.add_argument("--threads", type=int, default=0)
p.add_argument("--backend", default="gloo")
a = p.parse_args()

if a.backend not in ("gloo", "nccl", "mpi"):
    import importlib

    importlib.import_module(a.backend + "_torch")
dist.init_process_group(a.backend)
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
torch.set_num_threads(a.threads or max(1, (os.cpu_count() or 1) // local))
torch.manual_seed(0)

layers, d = [], 784
for _ in range(a.depth):
    layers += [nn.Linear(d, a.hidden), nn.ReLU()]
    d = a.hidden
layers.append(nn.Linear(d, 10))
model = nn.Sequential(*layers)
nparams = sum(p.numel() for p in model.parameters())

if a.mode == "fsdp2":
    from torch.distributed.fsdp import fully_shard

    for m in model:
        if isinstance(m, nn.Linear):
            fully_shard(m, reshard_after_forward=bool(a.reshard_after_forward))
    fully_shard(model, reshard_after_forward=bool(a.reshard_after_forward))
else:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model)

if a.optimizer == "adam":
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
else:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
crit = nn.CrossEntropyLoss()
g = torch.Generator().manual_seed(rank)
x = torch.randn(a.batch, 784, generator=g)
y = torch.randint(0, 10, (a.batch,), generator=g)


def step():
    opt.zero_grad(set_to_none=True)
    loss = crit(model(x), y)
    loss.backward()
    opt.step()
    return loss


for _ in range(a.warmup):
    step()
dist.barrier()
t = time.time()
for _ in range(a.steps):
    step()
dist.barrier()
elapsed = time.time() - t


def local_numel(t):
    # A DTensor's local shard (FSDP2), or the tensor itself.
    return (t.to_local() if hasattr(t, "to_local") else t).numel()


mib = 4 / (1024 * 1024)
params = sum(local_numel(p) for p in model.parameters()) * mib
grads = sum(local_numel(p.grad) for p in model.parameters() if p.grad is not None) * mib
state = 0
for s in opt.state.values():
    for v in s.values():
        if torch.is_tensor(v) and v.dim() > 0:
            state += local_numel(v) * v.element_size() / (1024 * 1024)


def vmhwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


vals = torch.tensor([elapsed, vmhwm(), params, grads, state], dtype=torch.float64)
dist.all_reduce(vals, op=dist.ReduceOp.MAX)
if rank == 0:
    elapsed, rss, params, grads, state = vals.tolist()
    print(
        json.dumps(
            {
                "bench": "torch_" + a.mode,
                "backend": a.backend,
                "world": world,
                "hidden": a.hidden,
                "depth": a.depth,
                "params": nparams,
                "batch": a.batch,
                "optimizer": a.optimizer,
                "reshard_after_forward": a.reshard_after_forward,
                "samples_per_s": a.steps * a.batch * world / elapsed,
                "step_ms": 1e3 * elapsed / a.steps,
                "peak_rss_mib": rss,
                "params_mib": params,
                "grads_mib": grads,
                "optim_mib": state,
            }
        )
    )
dist.destroy_process_group()
