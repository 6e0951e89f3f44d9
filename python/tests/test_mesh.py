"""DeviceMesh and DTensor over a backend (`phalanx`, the default, or `gloo` as the first
argument), on 2 or 4 ranks under `phalanx launch` or torchrun.

- Groups: the world's, `new_group`'s, `split_group`'s and every mesh dimension's name, ranks and
  this rank's place, printed as one JSON line per rank (`groups {...}`), which must read the
  same under phalanx and gloo (crates/cli/tests/torch_backend.rs compares them).
- DTensor on the 1-D mesh and, on 4 ranks, on a 2x2 mesh ("replicate", "shard"): sharded and
  replicated placements, redistribution (all-gather, reduce-scatter, all-to-all, all-reduce of
  a Partial), a matmul and a sum of sharded tensors, each equal to the same computation on
  whole tensors.
- Tensor parallelism: an MLP split by columns then rows over the 1-D mesh equals the whole
  MLP, forward and backward.
- A mesh larger than the world is refused with torch's sentence naming both sizes.

Prints `mesh and dtensor over <backend> ok`.
"""

import copy
import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import phalanx_torch  # noqa: F401 - registers "phalanx"


def describe(pg):
    return {"name": pg.group_name, "ranks": dist.get_process_group_ranks(pg),
            "rank": dist.get_rank(pg), "size": dist.get_world_size(pg)}


def check_dtensor(mesh, placements, rank):
    torch.manual_seed(7)  # the same whole tensors on every rank
    a, b = torch.randn(8, 12), torch.randn(12, 8)
    da = distribute_tensor(a, mesh, placements)
    db = distribute_tensor(b, mesh, [Replicate()] * mesh.ndim)
    assert torch.equal(da.full_tensor(), a), "shard then gather"
    assert torch.allclose((da @ db).full_tensor(), a @ b, atol=1e-5), "matmul"
    assert torch.allclose(da.sum().full_tensor(), a.sum(), atol=1e-4), "sum"
    # Shard(0) -> Shard(1) on the last dimension is an all-to-all.
    moved = da.redistribute(mesh, list(placements[:-1]) + [Shard(1)])
    assert torch.equal(moved.full_tensor(), a), "all-to-all"
    # Partial -> Replicate is an all-reduce; Partial -> Shard a reduce-scatter.
    # (Every rank but the first at each coordinate holds zeros, so the sum is exact.)
    first = all(c == 0 for c in mesh.get_coordinate())
    partial = DTensor.from_local(a if first else torch.zeros_like(a), mesh,
                                 [Partial()] * mesh.ndim)
    assert torch.equal(partial.redistribute(mesh, [Replicate()] * mesh.ndim).to_local(), a), \
        "partial to replicate"
    scattered = partial.redistribute(mesh, [Shard(0)] * mesh.ndim)
    assert torch.equal(scattered.full_tensor(), a), "partial to shard"
    print(f"rank {rank}: dtensor on mesh {tuple(mesh.shape)} {placements} ok", flush=True)


def check_tensor_parallel(mesh, rank):
    """An MLP split by columns then rows (Megatron's layout) over the mesh computes what the
    whole MLP does, forward and backward."""
    torch.manual_seed(3)
    whole = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    split = copy.deepcopy(whole)
    parallelize_module(split, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = torch.randn(4, 8)
    y = split(x)
    assert torch.allclose(y, whole(x), atol=1e-5), "tensor-parallel forward"
    y.sum().backward()
    whole(x).sum().backward()
    for (name, p), q in zip(split.named_parameters(), whole.parameters()):
        assert torch.allclose(p.grad.full_tensor(), q.grad, atol=1e-5), name
    print(f"rank {rank}: tensor parallel on mesh {tuple(mesh.shape)} ok", flush=True)


def main():
    backend = sys.argv[1] if len(sys.argv) > 1 else "phalanx"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"world": describe(dist.group.WORLD)}
    groups["new_group"] = describe(dist.new_group(list(range(world))[::-1]))
    halves = [list(range(world // 2)), list(range(world // 2, world))]
    groups["split_group"] = describe(dist.split_group(split_ranks=halves))
    outside = dist.split_group(split_ranks=[[0]])
    groups["split_group outside"] = (
        describe(outside) if rank == 0 else outside == dist.GroupMember.NON_GROUP_MEMBER
    )
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    groups["mesh 1-D"] = describe(mesh.get_group("dp"))
    check_dtensor(mesh, [Shard(0)], rank)
    check_tensor_parallel(mesh, rank)
    if world == 4:
        mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
        for name in ("replicate", "shard"):
            groups[f"mesh 2x2 {name}"] = describe(mesh2.get_group(name))
            assert mesh2.get_group(name)._get_backend(torch.device("cpu")).name() == backend
        check_dtensor(mesh2, [Shard(0), Shard(1)], rank)
        check_dtensor(mesh2, [Replicate(), Shard(0)], rank)
    print("groups " + json.dumps(groups, sort_keys=True), flush=True)
    try:
        init_device_mesh("cpu", (world + 1,))
        raise AssertionError("a mesh larger than the world was accepted")
    except RuntimeError as e:
        assert f"world size {world}" in str(e) and f"{world + 1} ranks" in str(e), str(e)
        print(f"rank {rank}: refused: {e}", flush=True)
    dist.barrier()
    print(f"rank {rank}: mesh and dtensor over {backend} ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
