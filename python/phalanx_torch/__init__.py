"""phalanx's collectives as a ``torch.distributed`` backend.

Importing this package registers the backend ``"phalanx"`` for CPU tensors::

    import torch, torch.distributed as dist
    import phalanx_torch                      # registers "phalanx"
    dist.init_process_group("phalanx")        # under `phalanx launch` or torchrun
    t = torch.ones(1024)
    dist.all_reduce(t)                        # shared memory on a host, TCP between hosts

The group rendezvouses through the store PyTorch hands the backend factory (the launcher's
store), then moves data on phalanx's own transport. Contiguous tensors are used in place; the
GIL is released while a collective runs; a failure raises ``PhalanxError`` naming the rank at
fault (a peer that died, a mismatched collective, a timeout). See docs/pytorch.md.

Note [A c10d Backend]: the factory returns a ``torch._C._distributed_c10d.Backend`` subclass
(``PhalanxBackend``; torch binds it through a pybind trampoline, which calls our methods by
their Python names: ``allreduce``, ``all_gather_single``, ``reduce_scatter_single``, their
``_coalesced`` forms, ``split``, …) and is registered with ``extended_api=True``. c10d then
builds the ``ProcessGroup`` itself, around our backend, and names it: ``group_name``,
``init_device_mesh``, DTensor, FSDP2's ``fully_shard`` and ``torch.distributed.checkpoint``
need that name. A factory returning a ``ProcessGroup`` subclass (this package before) takes
c10d's old path for Python groups, which never names the group.
"""

import os

import torch.distributed as dist

from . import _shims
from ._backend import PhalanxBackend
from ._native import PhalanxError

__all__ = ["PhalanxBackend", "PhalanxError"]


def _create(dist_opts, _backend_opts):
    """The factory c10d calls with `_DistributedBackendOptions` for every group of backend
    "phalanx" (the world, `new_group`, a DeviceMesh dimension)."""
    ranks = list(dist_opts.global_ranks_in_group)
    world = dist.get_world_size() if dist.is_initialized() else dist_opts.group_size
    subgroup = bool(ranks) and ranks != list(range(world))
    store = dist_opts.store
    # `phalanx launch` keeps one store for every round of a job (torchrun makes a new one per
    # round): a restarted round's ranks would find the last round's rendezvous keys and
    # refuse them ("two processes claim rank 1"), so each round rendezvouses under its own.
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt and attempt != "0":
        store = dist.PrefixStore(f"phalanx_round_{attempt}/", store)
    return PhalanxBackend(store, dist_opts.group_rank, dist_opts.group_size,
                          dist_opts.timeout, subgroup=subgroup)


if "phalanx" not in dist.Backend.backend_list:
    dist.Backend.register_backend("phalanx", _create, extended_api=True, devices=["cpu"])
    _shims.install()
    # phalanx records its collectives itself and dumps them in PyTorch's format (Note [Flight
    # recorder] in phalanx-pg, docs/flight-recorder.md). Unless told so, torch 2.15 attaches its
    # FlightRecorderHook to every group of a backend it does not know to record itself, and each
    # collective is recorded twice: ~10 us more per all_reduce, measured on one rank.
    _self_recording = getattr(dist.distributed_c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if _self_recording is not None:
        _self_recording.add("phalanx")
