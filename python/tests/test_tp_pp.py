"""PyTorch's own tensor parallelism and pipelining over backend "phalanx" against gloo, in the
same processes, on 2 ranks under `phalanx launch` or torchrun, tried as a user of PyTorch's
tutorials writes them:

- tensor parallelism: `parallelize_module` with `ColwiseParallel` and `RowwiseParallel` on a
  1-D DeviceMesh, a GPT-style block (the attention's query, key and value by columns, its
  output projection by rows; the MLP's first linear by columns, its second by rows), SGD, 30
  steps;
- pipelining: the same decoder cut into 2 stages (`PipelineStage`, one per rank), the batch in
  4 microbatches, `ScheduleGPipe` and `Schedule1F1B`, 30 steps each.

Each trains once on a mesh (or group) of phalanx's and once on gloo's, from the same initial
parameters and data: every step's loss and the final parameters must be bitwise equal (2
ranks: a sum of two values does not depend on the order it is taken in). Each run is timed;
with `--rounds N` the runs are repeated, phalanx and gloo interleaved, and each rank prints the
median seconds of each (`time tp phalanx 0.41 gloo 0.55`). Prints `tp and pp over phalanx ok`.
For benchmarks (bench/compare_tp.sh): `--steps N`, `--hidden D --seq-len S --batch B` (the
model's width, the tokens of a sample, the samples of a batch), `--only tp` (or `pp gpipe`,
`pp 1f1b`, comma-separated; `whole` trains the whole model on each rank alone, without
communication, on any number of ranks) and `--backends gloo` (the comparison needs both
backends, and is skipped with one).
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import phalanx_torch  # noqa: F401 - registers "phalanx"

STEPS = 30  # --steps

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=1)
parser.add_argument("--steps", type=int, default=STEPS)
parser.add_argument("--only", default="tp,pp gpipe,pp 1f1b")
parser.add_argument("--backends", default="phalanx,gloo")
parser.add_argument("--hidden", type=int, default=64)
parser.add_argument("--seq-len", type=int, default=32)
parser.add_argument("--batch", type=int, default=8)
args = parser.parse_args()

VOCAB, D, HEADS, SEQ, BATCH = 256, args.hidden, 4, args.seq_len, args.batch


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(D, D) for _ in range(3))
        self.proj = nn.Linear(D, D)

    def forward(self, x):
        b, s, _ = x.shape
        # The heads this rank holds: the local width over the head size (tensor parallelism
        # gives each rank HEADS / tp of them).
        q, k, v = (m(x) for m in (self.query, self.key, self.value))
        heads = q.shape[-1] // (D // HEADS)
        q, k, v = (t.view(b, s, heads, D // HEADS).transpose(1, 2) for t in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, -1))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(D), Attention(), nn.LayerNorm(D)
        self.fc, self.proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(nn.functional.gelu(self.fc(self.ln_2(x))))


class Gpt(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(SEQ, D)
        self.blocks = nn.ModuleDict({str(i): Block() for i in range(depth)})
        self.ln_f, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.blocks.values():
            h = block(h)
        return self.head(self.ln_f(h))


def loss_fn(logits, targets):
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def batches():
    g = torch.Generator().manual_seed(5)  # the same data on every rank
    for _ in range(args.steps):
        t = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
        yield t[:, :-1], t[:, 1:]


def tp_plan(depth):
    plan = {}
    for i in range(depth):
        for m in ("query", "key", "value"):
            plan[f"blocks.{i}.attn.{m}"] = ColwiseParallel()
        plan[f"blocks.{i}.attn.proj"] = RowwiseParallel()
        plan[f"blocks.{i}.fc"] = ColwiseParallel()
        plan[f"blocks.{i}.proj"] = RowwiseParallel()
    return plan


def train_tp(mesh):
    torch.manual_seed(0)
    return train_model(parallelize_module(Gpt(), mesh, tp_plan(2)))


def train_whole():
    """The whole model on this rank alone, no communication: the compute that tp and pp
    divide (bench/compare_tp.sh's one-process baseline)."""
    torch.manual_seed(0)
    return train_model(Gpt())


def train_model(model):
    """Trains `model` (whole, or its DTensor pieces) on every batch with SGD: the losses, the
    whole parameters and the seconds the steps took."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    begin = time.perf_counter()
    for x, y in batches():
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    seconds = time.perf_counter() - begin
    full = {n: (p.full_tensor() if hasattr(p, "full_tensor") else p.detach())
            for n, p in model.named_parameters()}
    return torch.stack(losses), full, seconds


class Stage(nn.Module):
    """Stage 0: the embeddings and the first block; stage 1: the second block and the head."""

    def __init__(self, whole, index):
        super().__init__()
        self.index = index
        if index == 0:
            self.wte, self.wpe, self.block = whole.wte, whole.wpe, whole.blocks["0"]
        else:
            self.block, self.ln_f, self.head = whole.blocks["1"], whole.ln_f, whole.head

    def forward(self, x):
        if self.index == 0:
            return self.block(self.wte(x) + self.wpe(torch.arange(x.shape[1])))
        return self.head(self.ln_f(self.block(x)))


def train_pp(schedule, group, rank):
    torch.manual_seed(0)
    stage_module = Stage(Gpt(), rank)
    stage = PipelineStage(stage_module, rank, 2, torch.device("cpu"), group=group)
    sched = schedule(stage, n_microbatches=4, loss_fn=loss_fn)
    opt = torch.optim.SGD(stage_module.parameters(), lr=0.1)
    losses = []
    begin = time.perf_counter()
    for x, y in batches():
        if rank == 0:
            sched.step(x)
        else:
            mb = []
            sched.step(target=y, losses=mb)
            losses.append(torch.stack(mb).mean().detach())
        opt.step()
        opt.zero_grad()
    seconds = time.perf_counter() - begin
    full = {n: p.detach().clone() for n, p in stage_module.named_parameters()}
    return (torch.stack(losses) if losses else torch.zeros(0)), full, seconds


def compare(what, a, b, rank):
    (la, pa, _), (lb, pb, _) = a, b
    same = torch.equal(la, lb) and pa.keys() == pb.keys() and all(
        torch.equal(pa[n], pb[n]) for n in pa)
    if not same:
        worst = max([(la - lb).abs().max().item() if la.numel() else 0.0]
                    + [(pa[n] - pb[n]).abs().max().item() for n in pa])
        raise AssertionError(f"rank {rank}: {what}: phalanx and gloo differ by {worst:g}")
    last = f" (last loss {la[-1].item():.6f})" if la.numel() else ""
    print(f"rank {rank}: {what}: {la.numel()} losses and {len(pa)} parameters bitwise equal "
          f"to gloo's{last}", flush=True)


def main():
    rounds = args.rounds
    backends = args.backends.split(",")
    dist.init_process_group("phalanx")
    rank, world = dist.get_rank(), dist.get_world_size()
    only = args.only.split(",")
    assert world == 2 or only == ["whole"], "run on 2 ranks (--only whole runs on any number)"
    meshes = {
        "phalanx": lambda: init_device_mesh("cpu", (world,), mesh_dim_names=("tp",)),
        "gloo": lambda: init_device_mesh("cpu", (world,), mesh_dim_names=("tp",),
                                         backend_override={"tp": "gloo"}),
    }
    over = {b: meshes[b]() for b in backends}
    groups = {b: m.get_group(0) for b, m in over.items()}
    runs = {
        "tp": lambda b: train_tp(over[b]),
        "pp gpipe": lambda b: train_pp(ScheduleGPipe, groups[b], rank),
        "pp 1f1b": lambda b: train_pp(Schedule1F1B, groups[b], rank),
        "whole": lambda b: train_whole(),
    }
    runs = {w: runs[w] for w in only}
    seconds = {(w, b): [] for w in runs for b in over}
    for r in range(rounds):
        for what, run in runs.items():
            # Interleaved, and each backend first in turn: a warm cache favours neither.
            order = tuple(backends) if r % 2 == 0 else tuple(reversed(backends))
            results = {b: run(b) for b in order}
            for b in order:
                seconds[(what, b)].append(results[b][2])
            if r == 0 and len(backends) == 2:
                compare(f"{what} over 2 ranks", results["phalanx"], results["gloo"], rank)
    tokens = args.steps * BATCH * SEQ
    for what in runs:
        median = {b: statistics.median(seconds[(what, b)]) for b in backends}
        times = " ".join(f"{b} {s:.3f} s ({tokens / s:.0f} tokens/s)" for b, s in median.items())
        ratio = (f", gloo/phalanx {median['gloo'] / median['phalanx']:.2f}"
                 if len(median) == 2 else "")
        print(f"rank {rank}: time {what} {times}{ratio} over {rounds} round(s)", flush=True)
    dist.barrier()
    print(f"rank {rank}: tp and pp over phalanx ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
