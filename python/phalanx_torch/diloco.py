"""DiLoCo, Streaming DiLoCo and local SGD across islands for a PyTorch loop, with torchft's
semantics (``torchft.local_sgd.DiLoCo``: ``sync_every``, model fragments synced in turn with
``fragment_sync_delay`` and ``fragment_update_alpha``, the outer optimizer as a torch optimizer
over the model's parameters), over any ``torch.distributed`` backend, ``"phalanx"`` included::

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

``fault_tolerance=True``, under ``phalanx launch --fault-tolerance``, makes every rank an
island of its own that may leave and join (Note [Islands that come and go]), with fragments
(each synced at its own step: ``fragment_sync_delay`` must be 0) and ``outer_dtype`` as
above: the outer sync
averages the pseudo-gradients over the islands alive through a ``phalanx_torch.ft.Manager``
(``diloco.manager``: its ``slot`` decides the data shard, ``finished`` says a replacement found
the run over, ``finish()`` ends it); an island lost costs the others the sync it broke, redone
without it, and a replacement joins at the next sync with the global parameters, the outer
optimizer's state and the count of inner steps, taken from a peer over the transport::

    diloco = DiLoCo(model, inner, outer, sync_every=20, fault_tolerance=True)
    if diloco.manager.finished:
        raise SystemExit(0)
    while diloco.steps < total:
        x, y = batch(diloco.steps, diloco.manager.slot)
        inner.zero_grad()
        loss_fn(model(x), y).backward()
        inner.step()          # the sync every 20 steps survives a lost island
    diloco.sync()
    diloco.manager.finish()

``fragments=F`` (an int: the parameters in order, cut at parameter boundaries into ``F`` runs
of nearly equal size; or a list of modules, torchft's ``model_fragments``) is Streaming DiLoCo
(Note [Streaming fragments]): fragment ``k``'s sync ends at the inner steps
``(k + 1 + F i) sync_every / F``, and starts ``fragment_sync_delay`` steps earlier, its
all-reduce between islands running (``async_op``) while the inner steps go on; when it ends the
fragment's parameters become ``global + alpha (local - global)``, ``alpha`` being
``fragment_update_alpha``.
"""

import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from . import ft

__all__ = ["DiLoCo"]

# Note [Islands that come and go]
# A torch ``ProcessGroup`` keeps its members for life, so islands that leave and join cannot
# run their outer sync over the device mesh's groups. Under ``fault_tolerance`` every rank is
# an island of its own, and the sync runs through ``phalanx_torch.ft``'s Manager, whose group
# is re-formed at each membership change (Note [Averaging outside torch's ProcessGroup] in
# ft.py). The sync of a fragment is then a data-parallel step of the outer optimizer on its
# parameters: each takes the global value, its gradient is the pseudo-gradient (global minus
# local), and the Manager averages those gradients over the islands alive (in
# ``outer_dtype``) before the outer optimizer steps them. So:
# - an island lost mid-sync fails the averaging on every other: they re-form without it and
#   redo the sync from the local parameters they kept, the mean now over the islands left;
#   lost between two syncs, it is noticed at the next one, which the others redo alike;
# - a rank whose averaging completed just before the loss is one sync ahead, and hands the
#   others its state (the Manager's rule: the newest step wins): its model, whose synced
#   fragment holds the new global parameters, and as extra state every fragment's global
#   parameters. A rank behind thus takes the source's progress on the other fragments too
#   (it was to redo a sync the source finished); ranks in step keep their own;
# - a replacement joins at a sync: at its boundary (the others connect it after their outer
#   step), or in the middle of one, when the others re-form after a loss and find it ready;
#   it then takes part in that sync at once, with no progress of its own. Either way it takes
#   the source's model (the global parameters of the whole model, or of the fragment just
#   synced and the source's own progress on the others), the outer optimizer's state, and as
#   extra state the global parameters, the inner step count and the source island's inner
#   optimizer state (an island starts as a copy of a live one); a survivor that was behind
#   keeps its own inner optimizer state. The
#   sync a replacement joins in the middle of averages over it too, its pseudo-gradient zero,
#   so that sync's step is the islands' progress over one more island.
# Islands of several ranks would need their inner DDP group to change members too; and a
# fragment's sync overlapped with the inner steps (``fragment_sync_delay``) would have to be
# redone from inner steps gone by: both are refused with fault_tolerance.


class DiLoCo:
    """The outer sync of ``model`` across islands, driven by ``inner_optimizer``'s steps.

    ``island_size``: ranks per island (default ``LOCAL_WORLD_SIZE``, one host). ``fragments``:
    ``None`` (the whole model at each sync), an int, or a list of modules that together hold
    the model's parameters. Construction is a collective of the default group.
    """

    def __init__(self, model, inner_optimizer, outer_optimizer, sync_every, *,
                 island_size=None, outer_dtype=torch.float32, fragments=None,
                 fragment_sync_delay=0, fragment_update_alpha=0.0, fault_tolerance=False):
        if not isinstance(sync_every, int) or sync_every < 1:
            raise ValueError(f"sync_every={sync_every!r}: the inner steps between outer syncs, "
                             "at least 1 (DiLoCo's paper uses 500, torchft's examples 20 to 100)")
        if outer_dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"outer_dtype={outer_dtype}: use torch.float32 or torch.bfloat16 "
                             "(int8 and fp4 are phalanx train's, --outer-dtype)")
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.fragments = _fragments(self.params, fragments)
        count = len(self.fragments)
        if sync_every % count:
            raise ValueError(f"sync_every={sync_every} is not a multiple of the {count} "
                             "fragments: one fragment syncs every sync_every / fragments steps")
        self.cadence = sync_every // count
        if not isinstance(fragment_sync_delay, int) or not 0 <= fragment_sync_delay < self.cadence:
            raise ValueError(f"fragment_sync_delay={fragment_sync_delay!r}: at least 0 and below "
                             f"sync_every / fragments = {self.cadence}, so that a fragment's sync "
                             "ends before the next one starts")
        if not 0.0 <= fragment_update_alpha <= 1.0:
            raise ValueError(f"fragment_update_alpha={fragment_update_alpha!r}: the share of the "
                             "island's own progress a synced fragment keeps, 0 to 1")
        self.sync_every = sync_every
        self.outer_optimizer = outer_optimizer
        self.steps = 0
        self.syncs = 0
        self.manager = None
        if fault_tolerance:
            self._start_fault_tolerant(model, inner_optimizer, island_size, outer_dtype,
                                       fragment_sync_delay, fragment_update_alpha)
            return
        world = dist.get_world_size()
        size = island_size or int(os.environ.get("LOCAL_WORLD_SIZE", world))
        if size < 1 or world % size:
            sizes = ", ".join(str(d) for d in range(1, world + 1) if world % d == 0)
            raise ValueError(f"an island of {size} ranks does not divide the world's {world} "
                             f"ranks into islands of equal size: use island_size {sizes}")
        self.delay = fragment_sync_delay
        self.alpha = fragment_update_alpha
        self.outer_dtype = outer_dtype
        self.islands = world // size
        self.mesh = init_device_mesh("cpu", (self.islands, size), mesh_dim_names=("island", "dp"))
        self.island_group = self.mesh.get_group("dp")
        self.across_group = self.mesh.get_group("island")
        self._pending = None
        with torch.no_grad():
            for p in self.params:
                dist.broadcast(p, group_src=0, group=self.across_group)
        self._global = [_flat(f) for f in self.fragments]
        # Which fragments may differ from the global parameters (moved by an inner step since
        # their sync, or synced keeping some of the island's progress).
        self._apart = [False] * len(self.fragments)
        self._hook = inner_optimizer.register_step_post_hook(self._after_step)

    def _start_fault_tolerant(self, model, inner_optimizer, island_size, outer_dtype, delay,
                              alpha):
        """Islands of one rank each through a Manager (Note [Islands that come and go]): the
        first ranks start from rank 0's parameters, a replacement from a live island's."""
        if island_size not in (None, 1):
            raise ValueError(f"island_size={island_size} with fault_tolerance: every rank is an "
                             "island of its own (an island's inner group cannot change members)")
        if delay:
            raise ValueError(f"fragment_sync_delay={delay} with fault_tolerance: a fragment's "
                             "sync overlapped with the inner steps could not be redone after a "
                             "loss (its pseudo-gradient is gone by then); use 0, each fragment "
                             "syncing at its own step")
        self.delay, self.alpha, self.outer_dtype = 0, alpha, outer_dtype
        self._inner = inner_optimizer
        self.island_group = self.across_group = None
        self._global = [_flat(f) for f in self.fragments]
        self._apart = [False] * len(self.fragments)
        # The fragment whose sync this rank is inside and that sync's alpha, its outer step
        # not taken yet, as a peer that hands its state over says (a replacement joining then
        # takes part in it).
        self._in_sync = self._joins_in_sync = None
        self.manager = ft.Manager(model, self.outer_optimizer, state_dict=self._state,
                                  load_state_dict=self._load_state)
        if not self.manager.fault_tolerant:
            # Without phalanx launch --fault-tolerance the Manager broadcast rank 0's model
            # to every rank (as DDP does) and handed nothing over: the global parameters are
            # that model.
            self._global = [_flat(f) for f in self.fragments]
        self._outer_hook = self.outer_optimizer.register_step_post_hook(self._outer_stepped)
        self.islands = self.manager.world_size
        self._hook = inner_optimizer.register_step_post_hook(self._after_step)
        if self._joins_in_sync is not None:
            # The others re-formed with this replacement in the middle of a sync: it takes
            # part at once, with no progress of its own (its parameters are the global ones),
            # and so keeps none of it, whatever the sync's alpha.
            (k, alpha), self._joins_in_sync = self._joins_in_sync, None
            self._sync_alive(k, alpha, joining=True)

    def _state(self):
        return {"steps": self.steps, "inner": self._inner.state_dict(), "in_sync": self._in_sync,
                "global": self._global, "apart": self._apart}

    def _load_state(self, state):
        self.steps = state["steps"]
        # Every island holds the same global parameters; a peer ahead by one sync holds the
        # newer ones of the fragment it synced.
        self._global = [g.clone() for g in state["global"]]
        self._apart = list(state["apart"])
        if self.manager is None:
            # Joining (or starting): the island starts as a copy of the source's. A rank that
            # was behind keeps its own inner state.
            self._inner.load_state_dict(state["inner"])
            self._joins_in_sync = state["in_sync"]

    def _outer_stepped(self, _optimizer, _args, _kwargs):
        self._in_sync = None

    @torch.no_grad()
    def _sync_alive(self, k, alpha, joining=False):
        """Fragment ``k``'s outer sync over the islands alive (Note [Islands that come and
        go]): redone from this island's kept parameters while the group fails and re-forms,
        unless a peer that finished it hands its state over; then its parameters become
        ``global + alpha (local - global)`` (a replacement ``joining`` in the middle of it has
        no progress to keep: it takes the global ones, and counts as apart as the others do)."""
        before = self.manager.step
        params = self.fragments[k]
        local = [p.detach().clone() for p in params]
        while True:
            self._in_sync = (k, alpha)
            for p in self.params:
                p.grad = None
            at = 0
            for p, mine in zip(params, local):
                size = p.numel()
                g = self._global[k][at:at + size].view_as(p)
                p.copy_(g)
                p.grad = (g - mine.float()).to(p.dtype)
                at += size
            if self.manager.allreduce_gradients(params, self.outer_dtype):
                # Only this fragment's parameters have gradients: the outer optimizer steps
                # them alone.
                self.outer_optimizer.step()
                self._global[k] = _flat(params)
                if alpha and not joining:
                    for p, mine in zip(params, local):
                        p.lerp_(mine, alpha)
                self._apart[k] = bool(alpha)
                self.manager.step_done()
                break
            if self.manager.step > before:
                # A peer had finished it: its parameters, global ones and outer state came
                # with its handover.
                break
        self._in_sync = None
        for p in self.params:
            p.grad = None
        self.islands = self.manager.world_size
        self.syncs = self.manager.step

    def _after_step(self, _optimizer, _args, _kwargs):
        self.steps += 1
        self._apart = [True] * len(self.fragments)
        if self.manager is not None:
            if self.steps % self.cadence == 0:
                self._sync_alive((self.steps // self.cadence - 1) % len(self.fragments),
                                 self.alpha)
            return
        ahead = self.steps + self.delay
        if ahead % self.cadence == 0:
            self._begin((ahead // self.cadence - 1) % len(self.fragments), self.delay > 0)
        if self.steps % self.cadence == 0:
            self._complete(self.alpha)

    @torch.no_grad()
    def sync(self):
        """Ends every island on the global parameters now, whatever the count: the sync under
        way ends, then every fragment that may be apart syncs keeping none of the islands' own
        progress (one that is not would only take a momentum step). A collective of the
        world (of the islands alive, under fault_tolerance)."""
        if self.manager is not None:
            for k in range(len(self.fragments)):
                if self._apart[k]:
                    self._sync_alive(k, 0.0)
            return
        if self._pending is not None:
            self._complete(self.alpha)
        for k in range(len(self.fragments)):
            if self._apart[k]:
                self._begin(k, False)
                self._complete(0.0)

    @torch.no_grad()
    def _begin(self, k, overlap):
        """Fragment ``k``'s chunk of the pseudo-gradient, its sum across islands started (and
        left running when ``overlap``)."""
        n = dist.get_world_size(self.island_group)
        j = dist.get_rank(self.island_group)
        delta = self._global[k] - _flat(self.fragments[k])
        per = -(-delta.numel() // n)
        padded = torch.zeros(per * n)
        padded[:delta.numel()] = delta
        mine = padded[j * per:(j + 1) * per].to(self.outer_dtype)
        work = dist.all_reduce(mine, group=self.across_group, async_op=overlap)
        self._pending = (k, mine, work, per)

    @torch.no_grad()
    def _complete(self, alpha):
        """Waits for the sum, gathers the mean over the island, steps the fragment's global
        parameters with the outer optimizer and sets them as ``global + alpha (local -
        global)``."""
        k, mine, work, per = self._pending
        self._pending = None
        if work is not None:
            work.wait()
        mine = mine.float() / self.islands
        whole = torch.empty(per * dist.get_world_size(self.island_group))
        dist.all_gather_into_tensor(whole, mine, group=self.island_group)
        params = self.fragments[k]
        local = [p.detach().clone() for p in params]
        for p in self.params:
            p.grad = None
        at = 0
        for p in params:
            size = p.numel()
            p.copy_(self._global[k][at:at + size].view_as(p))
            p.grad = whole[at:at + size].view_as(p).to(p.dtype).clone()
            at += size
        # Only this fragment's parameters have gradients: the outer optimizer steps them alone.
        self.outer_optimizer.step()
        for p in self.params:
            p.grad = None
        self._global[k] = _flat(params)
        if alpha:
            for p, mine in zip(params, local):
                p.lerp_(mine, alpha)
        self._apart[k] = bool(alpha)
        self.syncs += 1

    def close(self):
        """Stops following the inner optimizer's steps."""
        self._hook.remove()
        if self.manager is not None:
            self._outer_hook.remove()


def _flat(params):
    return torch.cat([p.detach().reshape(-1).float() for p in params])


def _fragments(params, fragments):
    """The parameters of each fragment, in the model's order."""
    if fragments is None:
        return [params]
    if isinstance(fragments, int):
        if fragments < 1 or fragments > len(params):
            raise ValueError(f"fragments={fragments}: between 1 and the model's {len(params)} "
                             "trainable parameters (fragments are cut at parameter boundaries)")
        # Each cut at the parameter boundary nearest its share of the elements, leaving at
        # least one parameter to every fragment: runs of nearly equal size, in order.
        starts = [0]
        for p in params:
            starts.append(starts[-1] + p.numel())
        total, bounds = starts[-1], [0]
        for b in range(1, fragments):
            room = range(bounds[-1] + 1, len(params) - (fragments - b) + 1)
            bounds.append(min(room, key=lambda i: abs(starts[i] * fragments - b * total)))
        bounds.append(len(params))
        return [params[lo:hi] for lo, hi in zip(bounds, bounds[1:])]
    mine = {id(p) for p in params}
    cut = [[p for p in m.parameters() if p.requires_grad] for m in fragments]
    held = [id(p) for f in cut for p in f]
    if sorted(held) != sorted(mine):
        raise ValueError("fragments: the modules must hold every trainable parameter of the "
                         "model once (torchft's model_fragments)")
    return cut
