"""`torch.distributed.checkpoint` over phalanx: an FSDP2 model and its Adam state saved sharded
by one world size, loaded by the same or another (2-4 ranks, under `phalanx launch` or
torchrun).

    test_dcp.py save DIR   # trains 3 steps, saves the sharded state to DIR, and (rank 0) the
                           # whole parameters and optimizer state to DIR/reference.pt
    test_dcp.py load DIR   # a fresh model (other initial values) loads DIR: its gathered
                           # parameters and optimizer state equal the reference bitwise
    test_dcp.py save,load DIR  # both, in turn, in the same processes (the load builds its
                               # model afresh): one start of torch instead of two

DCP plans and commits through the default group's collectives (gather and broadcast of
objects, all-gather, reduce-scatter), all of them phalanx's here. Prints `dcp save ok` or
`dcp load ok`.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import phalanx_torch  # noqa: F401 - registers "phalanx"


def sharded_model(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(10, 33), nn.ReLU(), nn.Linear(33, 17), nn.ReLU(),
                          nn.Linear(17, 4))
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def whole(model, opt):
    """Whole parameters and optimizer state, on every rank."""
    return get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))


def same(a, b, path=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), f"{path}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            same(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), f"{path}: differs by {(a - b).abs().max().item():g}"
    elif isinstance(a, (list, tuple)):
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def main():
    modes, path = sys.argv[1].split(","), sys.argv[2]
    unknown = [m for m in modes if m not in ("save", "load")]
    if unknown:
        raise SystemExit(f"usage: test_dcp.py save|load|save,load DIR; unknown mode(s) {unknown}")
    dist.init_process_group("phalanx")
    for mode in modes:
        run(mode, path)
        # The load reads what every rank's save wrote.
        dist.barrier()
    dist.destroy_process_group()


def run(mode, path):
    rank, world = dist.get_rank(), dist.get_world_size()
    if mode == "save":
        model, opt = sharded_model(0)
        g = torch.Generator().manual_seed(rank)
        for _ in range(3):
            model(torch.randn(6, 10, generator=g)).square().mean().backward()
            opt.step()
            opt.zero_grad()
        model_state, opt_state = get_state_dict(model, opt)
        dcp.save({"model": model_state, "optim": opt_state}, checkpoint_id=path)
        reference = whole(model, opt)
        if rank == 0:
            torch.save(reference, os.path.join(path, "reference.pt"))
        print(f"rank {rank}: dcp save ok ({world} ranks)", flush=True)
    else:
        model, opt = sharded_model(1)
        model_state, opt_state = get_state_dict(model, opt)
        state = {"model": model_state, "optim": opt_state}
        dcp.load(state, checkpoint_id=path)
        set_state_dict(model, opt, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        reference = torch.load(os.path.join(path, "reference.pt"), weights_only=False)
        same(whole(model, opt), reference)
        print(f"rank {rank}: dcp load ok ({world} ranks, parameters and Adam state equal)",
              flush=True)


if __name__ == "__main__":
    main()
