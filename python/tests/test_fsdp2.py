"""FSDP2 (`fully_shard`) over phalanx equals FSDP2 over Gloo, in the same processes.

Run on 2-4 ranks under `phalanx launch` or torchrun. The default group is phalanx's; a second
DeviceMesh of the same shape is made of Gloo groups (`backend_override`). The same model (an
MLP, then a small transformer), sharded per layer and at the root, trains 30 steps on each
mesh from the same initial parameters and data (SGD with momentum): every step's loss and the
gathered parameters at the end must be equal. Bitwise on 2 ranks and on the 2x2 HSDP mesh (a
sum of two values does not depend on the order it is taken in; measured bitwise on 3 ranks
too); on more ranks in one dimension within 1e-6 (phalanx's and Gloo's reduce-scatter add the
ranks' values in different orders: measured 4.8e-7 on 4 ranks; with Adam, whose step divides
by the gradients' size, such last-bit differences grow to 1e-3 in 30 steps either way). With 4
ranks it also trains HSDP on a 2x2 mesh ("replicate", "shard"). Prints `fsdp2 over phalanx ok`.
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import phalanx_torch  # noqa: F401 - registers "phalanx"

STEPS = 30


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(
            [nn.Linear(16, 64), nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 8)]
        )

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.relu(x)
        return x

    def batch(self, g):
        return torch.randn(8, 16, generator=g), torch.randn(8, 8, generator=g)


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.layers = nn.ModuleList(
            [
                nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
                for _ in range(2)
            ]
        )
        self.head = nn.Linear(32, 50)

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h).flatten(0, 1)

    def batch(self, g):
        x = torch.randint(0, 50, (4, 12), generator=g)
        return x, torch.randint(0, 50, (4 * 12,), generator=g)


def loss_of(model, out, y):
    if isinstance(model, Transformer):
        return nn.functional.cross_entropy(out, y)
    return nn.functional.mse_loss(out, y)


def train(make, mesh, rank):
    """30 steps of FSDP2 on `mesh`; every step's loss and the full parameters at the end."""
    torch.manual_seed(0)
    model = make()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1000 + rank)
    losses = []
    for _ in range(STEPS):
        x, y = model.batch(g)
        loss = loss_of(model, model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    full = {n: p.full_tensor() for n, p in model.named_parameters()}
    return torch.stack(losses), full


def compare(what, a, b, bitwise, rank):
    (la, pa), (lb, pb) = a, b
    diffs = [(la - lb).abs().max().item()]
    diffs += [(pa[n] - pb[n]).abs().max().item() for n in pa]
    worst = max(diffs)
    same = torch.equal(la, lb) and all(torch.equal(pa[n], pb[n]) for n in pa)
    if bitwise and not same:
        raise AssertionError(f"rank {rank}: {what}: phalanx and gloo differ (max {worst:g})")
    if worst > 1e-6:
        raise AssertionError(f"rank {rank}: {what}: phalanx and gloo differ by {worst:g}")
    kind = "bitwise equal" if same else f"equal within {worst:.1e}"
    print(f"rank {rank}: {what}: {STEPS} losses and {len(pa)} parameters {kind} to gloo's "
          f"(last loss {la[-1].item():.6f})", flush=True)


def main():
    dist.init_process_group("phalanx")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "phalanx"
    meshes = {"1-D": ((world,), ("shard",), world == 2)}
    if world == 4:
        meshes["2x2 HSDP"] = ((2, 2), ("replicate", "shard"), True)
    for label, (shape, names, bitwise) in meshes.items():
        over_phalanx = init_device_mesh("cpu", shape, mesh_dim_names=names)
        over_gloo = init_device_mesh(
            "cpu", shape, mesh_dim_names=names, backend_override={n: "gloo" for n in names}
        )
        for d in range(len(shape)):
            assert over_phalanx.get_group(d)._get_backend(torch.device("cpu")).name() == "phalanx"
            assert over_gloo.get_group(d)._get_backend(torch.device("cpu")).name() == "gloo"
        for make in (MLP, Transformer):
            what = f"fsdp2 {make.__name__.lower()} on the {label} mesh {shape}"
            compare(what, train(make, over_phalanx, rank), train(make, over_gloo, rank),
                    bitwise, rank)
    dist.barrier()
    print(f"rank {rank}: fsdp2 over phalanx ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
