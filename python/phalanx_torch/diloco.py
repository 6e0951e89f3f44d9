"""DiLoCo and local SGD across islands for a PyTorch loop, with torchft's semantics
(``torchft.local_sgd.DiLoCo``: ``sync_every``, the outer optimizer as a torch optimizer over
the model's parameters), over any ``torch.distributed`` backend, ``"phalanx"`` included::

    import torch, torch.distributed as dist
    import phalanx_torch
    from phalanx_torch.diloco import DiLoCo
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("phalanx")
    model = torch.nn.Linear(16, 4)
    inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
    outer = torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True)
    diloco = DiLoCo(model, inner, outer, sync_every=100)   # islands: one host each
    ddp = DDP(model, process_group=diloco.island_group)    # inside an island, every step
    for x, y in batches:
        inner.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        inner.step()          # every sync_every-th step is followed by the outer sync
    diloco.sync()             # end on the global parameters (if the count did not)

The world is laid out as a mesh ``("island", I), ("dp", N)`` of consecutive ranks (Note
[Outer sync] in crates/ddp/src/outer/mod.rs; ``phalanx train --outer`` is the same algorithm in
Rust): an island's ``dp`` group runs the inner loop, and at a sync each rank ``j`` of an island
averages chunk ``j`` of the pseudo-gradient (the global parameters minus the local ones) over
its ``island`` group, the only collective between islands, then all-gathers the chunks over
its island. The outer optimizer then steps the global parameters with that gradient, on every
rank alike: ``SGD(lr=0.7, momentum=0.9, nesterov=True)`` is DiLoCo, ``SGD(lr=1)`` local SGD
(the islands' mean). As in torchft, the parameters are synced and the buffers are not; the
inner optimizer's state stays with its island. ``outer_dtype=torch.bfloat16`` halves the bytes
between islands. At construction every island takes island 0's parameters.
"""

import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

__all__ = ["DiLoCo"]


class DiLoCo:
    """The outer sync of ``model`` across islands, driven by ``inner_optimizer``'s steps.

    ``island_size``: ranks per island (default ``LOCAL_WORLD_SIZE``, one host). Construction
    is a collective of the default group.
    """

    def __init__(self, model, inner_optimizer, outer_optimizer, sync_every, *,
                 island_size=None, outer_dtype=torch.float32):
        if not isinstance(sync_every, int) or sync_every < 1:
            raise ValueError(f"sync_every={sync_every!r}: the inner steps between outer syncs, "
                             "at least 1 (DiLoCo's paper uses 500, torchft's examples 20 to 100)")
        if outer_dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"outer_dtype={outer_dtype}: use torch.float32 or torch.bfloat16 "
                             "(int8 and fp4 are phalanx train's, --outer-dtype)")
        world = dist.get_world_size()
        size = island_size or int(os.environ.get("LOCAL_WORLD_SIZE", world))
        if size < 1 or world % size:
            sizes = ", ".join(str(d) for d in range(1, world + 1) if world % d == 0)
            raise ValueError(f"an island of {size} ranks does not divide the world's {world} "
                             f"ranks into islands of equal size: use island_size {sizes}")
        self.sync_every = sync_every
        self.outer_optimizer = outer_optimizer
        self.outer_dtype = outer_dtype
        self.islands = world // size
        self.mesh = init_device_mesh("cpu", (self.islands, size), mesh_dim_names=("island", "dp"))
        self.island_group = self.mesh.get_group("dp")
        self.across_group = self.mesh.get_group("island")
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.since_sync = 0
        self.syncs = 0
        with torch.no_grad():
            for p in self.params:
                dist.broadcast(p, group_src=0, group=self.across_group)
        self._global = self._flat()
        self._hook = inner_optimizer.register_step_post_hook(self._after_step)

    def _flat(self):
        return torch.cat([p.detach().reshape(-1).float() for p in self.params])

    def _after_step(self, _optimizer, _args, _kwargs):
        self.since_sync += 1
        if self.since_sync >= self.sync_every:
            self.sync()

    @torch.no_grad()
    def sync(self):
        """An outer sync now, whatever the count (a collective of the world)."""
        n = dist.get_world_size(self.island_group)
        j = dist.get_rank(self.island_group)
        delta = self._global - self._flat()
        per = -(-delta.numel() // n)
        padded = torch.zeros(per * n)
        padded[:delta.numel()] = delta
        mine = padded[j * per:(j + 1) * per].to(self.outer_dtype)
        dist.all_reduce(mine, group=self.across_group)
        mine = mine.float() / self.islands
        whole = torch.empty(per * n)
        dist.all_gather_into_tensor(whole, mine, group=self.island_group)
        at = 0
        for p in self.params:
            k = p.numel()
            p.copy_(self._global[at:at + k].view_as(p))
            p.grad = whole[at:at + k].view_as(p).to(p.dtype).clone()
            at += k
        self.outer_optimizer.step()
        for p in self.params:
            p.grad = None
        self._global = self._flat()
        self.since_sync = 0
        self.syncs += 1

    def close(self):
        """Stops following the inner optimizer's steps."""
        self._hook.remove()
