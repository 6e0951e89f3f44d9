"""Per-step fault tolerance for a PyTorch data-parallel loop under
``phalanx launch --fault-tolerance``: a rank that dies costs the others one step, not a restart.

::

    import torch, torch.nn as nn
    from phalanx_torch import ft

    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters())
    manager = ft.Manager(model, opt)          # a replacement takes a peer's state here
    opt = ft.OptimizerWrapper(manager, opt)   # step(): average gradients, then step
    while not manager.finished and manager.step < 1000:
        x, y = batch(manager.step, manager.slot)   # the slot decides the data shard
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()                            # False: the group failed and re-formed; redo
    manager.finish()                          # a rank still joining exits

Run it with ``phalanx launch --fault-tolerance --max-restarts 3 --nproc-per-node 3 train.py``.
When a rank dies the others' averaging fails at once; they re-form the group without it
(phalanx's generations: Note [FT generations] in crates/pg/src/fault_tolerance.rs), agree on who
holds the newest step, and redo the step that failed over the ranks alive. The launcher starts
a replacement (same ``RANK``, ``PHALANX_FT_REPLACEMENT=1``); once its model and optimizer are
built, ``Manager(...)`` adds it to the next generation, the running ranks connect it at their
next step boundary and hand it the step, the model's ``state_dict`` and the optimizer's over
phalanx's transport (nothing read from disk), and everyone trains on together.

Without ``--fault-tolerance`` the same loop averages over ``torch.distributed``'s default group
(if one is initialized, else it trains alone) and a failure raises as usual.

Note [Averaging outside torch's ProcessGroup]: a ``torch.distributed`` ``ProcessGroup`` has its
members fixed at creation: its size, its ranks, its name, and c10d's registry keyed on them. A
group that loses a member cannot take a new one in (``shrink_group`` only shrinks, and only
among ranks still alive; a replacement process cannot enter the old world group, whose
rendezvous is over), and ``DistributedDataParallel`` holds its group for life and broadcasts
over it at construction. So the ``Manager`` averages gradients itself, over the current
generation's phalanx group (one allreduce of all gradients flattened per dtype, then a
division by the generation's size), and torch's default group is not used at all: a new
generation is a new phalanx group, and nothing on the torch side has to change size. This is
torchft's shape too (its ``Manager`` owns a reconfigurable group beside torch's). The cost is
DDP's overlap of communication with the backward pass: the averaging runs after ``backward``,
which for the small models data-parallel CPU training uses is one latency-bound allreduce.
``shrink_group`` over backend phalanx is supported too (``PhalanxBackend.shrink``), for programs
that only need to go on with fewer ranks.

Note [Who holds the state]: replicas are bitwise equal after every step, because every rank
applies the same averaged gradients; a step is applied only after the averaging succeeded on
this rank. After any membership change the ranks allgather the step each holds (a replacement
holds none) and the lowest rank holding the newest step sends its state to everyone when they
differ: a rank that finished the failed step (its averaging completed before the death was
noticed) is ahead of one whose averaging failed, and wins; when all hold the same step nobody
sends anything. The ranks that already hold the newest step keep their own state (equal to
the source's for replicas; an island of ``phalanx_torch.diloco`` keeps its own progress on the
fragments not synced in that step).
"""

import hashlib
import io
import sys
import time

import torch
import torch.distributed as dist

from ._native import EXIT_NO_REGROUP, FaultTolerance, PhalanxError
from ._tensors import reducible

__all__ = ["Manager", "OptimizerWrapper", "state_digest"]

# How many membership changes in a row one recovery goes through (each a death or a joiner
# while the previous generation formed) before it gives up.
MAX_REGROUPS = 8


def _log(msg):
    print(f"phalanx_torch.ft: {msg}", file=sys.stderr, flush=True)


def state_digest(model, optimizer=None):
    """A SHA-256 of the model's state (and the optimizer's tensors): equal on every replica."""
    h = hashlib.sha256()
    tensors = list(model.state_dict().values())
    if optimizer is not None:
        for state in optimizer.state_dict()["state"].values():
            tensors += [v for _, v in sorted(state.items()) if torch.is_tensor(v)]
    for t in tensors:
        h.update(t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class Manager:
    """Keeps one data-parallel replica of ``model`` and ``optimizer`` in step with the others
    across deaths and arrivals of ranks (see the module's docs).

    ``state_dict``/``load_state_dict``: optional callables for more state to hand a
    replacement (a scheduler, a data position), tensors and plain Python values only.

    Attributes: ``step`` (steps completed), ``slot`` (the rank this process started with:
    its data shard), ``rank``/``world_size`` (in the current generation), ``generation``,
    ``members`` (the slots alive), ``fault_tolerant`` (under ``--fault-tolerance``),
    ``finished`` (a replacement that found the run over), and
    ``recoveries``: one dict per membership change (``kind``, ``generation``, ``members``,
    ``seconds`` from the failure or the boundary to the group formed and in step,
    ``source``).
    """

    def __init__(self, model, optimizer, state_dict=None, load_state_dict=None):
        self.model, self.optimizer = model, optimizer
        self._extra_state, self._load_extra = state_dict, load_state_dict
        self.step = 0
        self.finished = False
        self.recoveries = []
        self._ft = FaultTolerance.from_env()
        self._group = None
        if self._ft is None:
            self._holds_state = True
            if self._torch_world() > 1:
                for t in self.model.state_dict().values():
                    dist.broadcast(t, src=0)  # as DDP's constructor does
            return
        # Only now, with the model and optimizer built, does a replacement ask to join: the
        # others train meanwhile.
        self._holds_state = not self._ft.is_replacement
        self._ft.take_part()
        began = time.monotonic()
        self._group = self._ft.join()
        if self._group is None:
            self.finished = True
            _log(f"slot {self.slot}: the run ended before this rank could join; nothing to do")
            return
        self._in_step("joined" if self._ft.is_replacement else "started", began,
                      everyone_sends=not self._ft.is_replacement)

    # -- where this rank stands --------------------------------------------------------------

    @property
    def slot(self):
        return self._ft.slot if self._ft is not None else self.rank

    @property
    def rank(self):
        if self._group is not None:
            return self._group.rank
        return dist.get_rank() if dist.is_initialized() else 0

    @property
    def world_size(self):
        if self._group is not None:
            return self._group.world_size
        return self._torch_world()

    @property
    def generation(self):
        return self._ft.generation if self._ft is not None else 0

    @property
    def fault_tolerant(self):
        """Whether the job runs under ``phalanx launch --fault-tolerance`` (else the Manager
        averages over torch's default group, and a failure raises)."""
        return self._ft is not None

    def newest_generation(self):
        """The newest generation the launcher or a joiner recorded, which this rank connects
        at its next step boundary or regroup (its own ``generation`` until then)."""
        return self._ft.newest() if self._ft is not None else 0

    @property
    def members(self):
        return self._ft.members if self._ft is not None else list(range(self.world_size))

    @staticmethod
    def _torch_world():
        return dist.get_world_size() if dist.is_initialized() else 1

    # -- a step ------------------------------------------------------------------------------

    def allreduce_gradients(self, params=None, dtype=None):
        """Averages every parameter's gradient over the ranks alive (a missing gradient
        counts as zeros). True when it did; False when the group failed meanwhile: it was
        re-formed, the gradients are stale, and the step must be redone (``step`` may have
        moved on: a peer had finished it).

        ``params``: only these parameters (default: every one the optimizer steps); every
        rank must name the same. ``dtype``: the gradients travel and are summed in it
        (``torch.bfloat16`` halves the bytes), each then set back in its own."""
        if params is None:
            params = [p for g in self.optimizer.param_groups for p in g["params"]
                      if p.requires_grad]
        by_dtype = {}
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            by_dtype.setdefault(dtype or p.dtype, []).append(p)
        failed_at = time.monotonic()
        try:
            for sent, ps in by_dtype.items():
                flat = torch.cat([p.grad.reshape(-1).to(sent) for p in ps])
                self._allreduce_sum(flat)
                flat.div_(self.world_size)
                at = 0
                for p in ps:
                    n = p.numel()
                    p.grad.copy_(flat[at:at + n].view_as(p.grad))
                    at += n
        except PhalanxError as e:
            if self._ft is None:
                raise
            self._recover(str(e), failed_at)
            return False
        return True

    def step_done(self):
        """The optimizer stepped: count it and, at this step boundary, connect a newer
        generation (a replacement ready to join) if every rank saw one."""
        self.step += 1
        if self._ft is None:
            return
        began = time.monotonic()
        try:
            newest = torch.tensor([self._ft.newest()], dtype=torch.int64)
            ptr, n, dt = reducible(newest, "the generation agreement")
            self._group.allreduce(ptr, n, dt, "max")
            if int(newest) > self.generation:
                self._group = self._ft.advance(int(newest))
                self._in_step("advanced", began)
        except PhalanxError as e:
            self._recover(str(e), began)

    def finish(self):
        """After the last step on every rank: a rank still joining exits with nothing to do."""
        if self._ft is not None and self._group is not None:
            self._ft.finish(self._group)

    # -- membership changes ------------------------------------------------------------------

    def _allreduce_sum(self, t):
        if self._group is None:
            if self._torch_world() > 1:
                dist.all_reduce(t)
            return
        ptr, n, dt = reducible(t, "gradient averaging")
        self._group.allreduce(ptr, n, dt, "sum")

    def _recover(self, cause, since):
        """The group failed with `cause`: re-form it (the launcher records the death) and get
        every member in step; again if it fails meanwhile."""
        for _ in range(MAX_REGROUPS):
            _log(f"slot {self.slot}: generation {self.generation} failed ({cause}); re-forming")
            try:
                self._group = self._ft.regroup(cause)
            except PhalanxError as e:
                # Nobody recorded a change within PHALANX_TIMEOUT: the launcher must not
                # replace this rank in turn (its exit code says so).
                _log(f"slot {self.slot}: {e}")
                raise SystemExit(EXIT_NO_REGROUP) from e
            try:
                self._in_step("regrouped", since)
                return
            except PhalanxError as e:
                if self._group.failure is None:
                    raise
                cause = str(e)
        raise PhalanxError(f"slot {self.slot}: the group failed {MAX_REGROUPS} times in a row "
                           f"while re-forming: {cause}")

    def _in_step(self, kind, since, everyone_sends=False):
        """Every member of the new group holds the newest step's state (Note [Who holds the
        state]); `everyone_sends`: the first group, where rank 0's state wins as in DDP."""
        world = self._group.world_size
        mine = torch.tensor([self.step if self._holds_state else -1], dtype=torch.int64)
        steps = torch.zeros(world, dtype=torch.int64)
        self._group.allgather(mine.data_ptr(), steps.data_ptr(), 8)
        steps = steps.tolist()
        newest = max(steps)
        if newest < 0:
            raise PhalanxError(f"slot {self.slot}: no rank of generation {self.generation} "
                               "holds the training state (every one is a replacement)")
        source = steps.index(newest)  # the lowest rank holding it
        if everyone_sends or any(s != newest for s in steps):
            # A rank that holds the newest step already keeps its own state (the first
            # group aside, where rank 0's state wins as in DDP).
            self._handover(source, keep=not everyone_sends and steps[self._group.rank] == newest)
        self.recoveries.append({
            "kind": kind, "generation": self.generation, "members": self.members,
            "seconds": time.monotonic() - since, "source": self.members[source],
            "step": self.step,
        })
        if kind != "started":
            _log(f"slot {self.slot}: {kind}: generation {self.generation} (slots "
                 f"{self.members}) in step at step {self.step} after "
                 f"{time.monotonic() - since:.3f} s, state from slot {self.members[source]}")

    def _handover(self, source, keep=False):
        """The source rank's step, model and optimizer state (and the caller's extra state) to
        every member, over the transport. This rank's own state is replaced only once it all
        arrived, so a failure meanwhile leaves it as it was; with ``keep`` (it holds the
        newest step too) it is not replaced. Replicas in step are equal, so keeping changes
        nothing for them; islands of ``phalanx_torch.diloco`` between two syncs of one
        fragment are not, and each keeps its own progress on the others."""
        sending = self._group.rank == source
        blob = torch.empty(0, dtype=torch.uint8)
        if sending:
            buf = io.BytesIO()
            torch.save({
                "step": self.step,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "extra": self._extra_state() if self._extra_state else None,
            }, buf)
            blob = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        size = torch.tensor([blob.numel()], dtype=torch.int64)
        self._group.broadcast(size.data_ptr(), 8, source)
        if not sending:
            blob = torch.empty(int(size), dtype=torch.uint8)
        self._group.broadcast(blob.data_ptr(), blob.numel(), source)
        if sending or keep:
            return
        state = torch.load(io.BytesIO(blob.numpy().tobytes()), weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self._load_extra is not None:
            self._load_extra(state["extra"])
        self.step = state["step"]
        self._holds_state = True


class OptimizerWrapper:
    """``optimizer`` whose ``step()`` first averages the gradients through ``manager``, and
    steps only when that succeeded: it returns True, or False when the group failed and
    re-formed (the step is to be redone: nothing was applied). Anything else is the wrapped
    optimizer's."""

    def __init__(self, manager, optimizer):
        self.manager, self.optimizer = manager, optimizer

    def step(self, closure=None):
        if not self.manager.allreduce_gradients():
            self.optimizer.zero_grad()
            return False
        self.optimizer.step(closure)
        self.manager.step_done()
        return True

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name):
        return getattr(self.optimizer, name)
