"""`PhalanxBackend`: one phalanx process group as a c10d `Backend`.

c10d builds a named `ProcessGroup` around it (Note [A c10d Backend] in `__init__.py`) and
calls the methods below by their torch names; each returns a `Work` (`_work.py`)."""

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
from torch._C._distributed_c10d import Backend, PrefixStore

from . import _tensors as T
from ._native import Group, PhalanxError
from ._p2p import PointToPoint
from ._work import Work

# Collectives up to this many bytes run on the caller's thread when the group is idle, even
# with async_op=True: they are latency-bound, and handing them to the group's thread costs
# more (about 20 us with the GIL) than it could overlap. Larger ones overlap the caller's work.
INLINE_BYTES = 1 << 20


class PhalanxBackend(Backend):
    """The ``"phalanx"`` backend: one phalanx process group for CPU tensors.

    Collectives run in the order they are called, one at a time, on one thread of this group:
    ``async_op=True`` returns at once and the work completes there; a blocking call on an idle
    group runs on the caller's thread (no hand-off).
    """

    def __init__(self, store, rank, world_size, timeout, subgroup=False):
        super().__init__(rank, world_size)
        seconds = timeout.total_seconds() if timeout is not None else 1800.0
        self._timeout = timeout
        self._group = Group(store, rank, world_size, seconds, subgroup)
        # Sends go at once (Note [Deferred point-to-point] in _p2p.py).
        self._group.start_progress()
        self._store, self._shrinks = store, 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="phalanx")
        self._lock = threading.Lock()
        self._queued = 0
        self._seq = 0
        self._p2p = PointToPoint(self._group, store, self._run)
        _ALIVE.add(self)  # Note [Backend lifetime]

    # -- execution ---------------------------------------------------------------------------

    def _run(self, opts, result, fn, *args, nbytes=0, keep=(), collective=True):
        """Runs `fn(*args)` in call order: on the caller's thread when the group is idle and
        the operation is small or blocking, else on the group's thread. `keep`: tensors whose
        memory `fn` uses beyond `result`, held until it is done. A collective counts in the
        group's sequence number (point-to-point operations do not)."""
        if collective:
            self._seq += 1
        blocking = opts is not None and getattr(opts, "asyncOp", True) is False
        inline = nbytes <= INLINE_BYTES or blocking
        with self._lock:
            idle = self._queued == 0
            # Counted either way: another thread must not start an operation meanwhile.
            self._queued += 1
        if inline and idle:
            try:
                fn(*args)
            except PhalanxError as e:
                if blocking:
                    raise
                return Work(result, error=e)  # async_op: the failure comes from wait()
            finally:
                with self._lock:
                    self._queued -= 1
            return Work(result)

        def job():
            try:
                fn(*args)
            finally:
                with self._lock:
                    self._queued -= 1

        return Work(result, self._executor.submit(job), keep=(result, keep))

    # -- identity and lifetime ---------------------------------------------------------------

    def getBackendName(self):
        return "phalanx"

    # Note [Backend properties]: torch 2.15's trampoline answers a `supports_*` property (and
    # `options`) that the Python class does not define by reading it from the instance, which
    # reaches the trampoline again (RecursionError): every one of them is defined here.

    @property
    def supports_splitting(self):
        return True

    @property
    def supports_coalescing(self):
        return False  # the coalescing manager calls the `_coalesced` methods instead

    @property
    def _supports_time_estimate(self):
        return False

    @property
    def supports_shrinking(self):
        return True

    @property
    def supports_reconfigure(self):
        return False

    @property
    def supports_window(self):
        return False

    @property
    def options(self):
        """This backend's options (c10d copies them into a split group's)."""
        opts = Backend.Options("phalanx", self._timeout) if self._timeout is not None \
            else Backend.Options("phalanx")
        return opts

    def split(self, store, ranks, opts):
        """`dist.split_group`: the group of `ranks` (this group's ranks, in the new group's
        order), connected through `store`; None on a rank outside it."""
        me = self.rank()
        if me not in ranks:
            return None
        timeout = getattr(opts, "_timeout", None) if opts is not None else None
        return PhalanxBackend(store, list(ranks).index(me), len(ranks),
                              timeout or self._timeout, subgroup=True)

    def shrink(self, excluded, flags, opts):
        """`dist.shrink_group`: this group without the ranks `excluded`, connected afresh
        through this group's store among the ranks left (which all call it, in the same
        order, and only they), ranks renumbered in order. The old group is not used: it may
        have failed, which is when programs shrink."""
        me = self.rank()
        left = [r for r in range(self.size()) if r not in set(excluded)]
        if me not in left:
            raise PhalanxError(f"shrink_group: rank {me} is in ranks_to_exclude {list(excluded)}; "
                               "only the ranks left call it")
        self._shrinks += 1
        store = PrefixStore(f"phalanx_shrink/{self._shrinks}/", self._store)
        timeout = getattr(opts, "_timeout", None) if opts is not None else None
        return PhalanxBackend(store, left.index(me), len(left), timeout or self._timeout,
                              subgroup=True)

    # The collectives' sequence number, which TORCH_DISTRIBUTED_DEBUG=DETAIL's checks compare
    # between ranks before every collective: every rank starts at 0 and counts the same calls.
    def _set_sequence_number_for_group(self):
        pass

    def _get_sequence_number_for_group(self):
        return self._seq

    def abort(self):
        self._group.abort("the process group was aborted")

    def shutdown(self):
        self._p2p.close()
        self._executor.shutdown(wait=True)
        _ALIVE.discard(self)

    # -- collectives -------------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        t = T.single(tensors, "allreduce")
        if t.is_sparse:
            return self.allreduce_sparse(tensors, opts)  # c10d sends sparse tensors here too
        ptr, n, dt = T.reducible(t, "allreduce")
        op, factor = T.op_scaled(opts, "allreduce", t)
        if factor is not None:
            t.mul_(factor)  # the output is the input: scaled in place, then summed
        return self._run(opts, tensors, self._group.allreduce, ptr, n, dt, op, nbytes=T.nbytes(t))

    def allreduce_coalesced(self, tensors, opts=None):
        op = T.op(opts, "allreduce_coalesced")
        calls = [T.reducible(t, "allreduce_coalesced") + (op,) for t in tensors]

        def each():
            for c in calls:
                self._group.allreduce(*c)

        return self._run(opts, tensors, each, nbytes=sum(T.nbytes(t) for t in tensors))

    def allreduce_sparse(self, tensors, opts=None):
        """A sparse (COO) tensor's SUM over the ranks: every rank's indices and values
        gathered (phalanx's allgather_v: the ranks hold different numbers of elements), then
        coalesced (duplicates added, in rank order) into the tensor."""
        t = T.single(tensors, "allreduce of a sparse tensor")
        if T.op(opts, "allreduce of a sparse tensor") != "sum":
            raise PhalanxError("allreduce of a sparse tensor: phalanx adds sparse tensors (SUM) "
                               "only")
        mine = t.coalesce()
        indices = mine.indices().t().contiguous()  # one row per element: a rank's block
        values = mine.values().contiguous()
        count = torch.tensor([values.shape[0]], dtype=torch.int64)
        counts = torch.empty(self.size(), dtype=torch.int64)

        def run():
            self._group.allgather(count.data_ptr(), counts.data_ptr(), T.nbytes(count))
            n = counts.tolist()
            every = []
            for mine_part in (indices, values):
                row = mine_part.element_size() * math.prod(mine_part.shape[1:])
                out = torch.empty((sum(n),) + tuple(mine_part.shape[1:]), dtype=mine_part.dtype)
                self._group.allgather_v(mine_part.data_ptr(), out.data_ptr(),
                                        [k * row for k in n])
                every.append(out)
            total = torch.sparse_coo_tensor(every[0].t(), every[1], t.shape).coalesce()
            t.copy_(total)

        return self._run(opts, tensors, run)

    def broadcast(self, tensors, opts):
        t = T.single(tensors, "broadcast")
        ptr, n = T.raw(t, "broadcast")
        return self._run(opts, tensors, self._group.broadcast, ptr, n, opts.rootRank, nbytes=n)

    def allgather(self, output_lists, input_list, opts=None):
        """`all_gather` into a list; the tensors may differ in size between ranks (each rank's
        list gives every rank's size): then phalanx's allgather_v."""
        t = T.single(input_list, "all_gather")
        outs = T.single(output_lists, "all_gather")
        T.of_dtype(outs, self.size(), t, "all_gather")
        T.check(t, "all_gather")
        mine = outs[self.rank()].numel()
        if t.numel() != mine:
            raise PhalanxError(
                f"all_gather: rank {self.rank()}'s input holds {t.numel()} elements but its "
                f"output tensor {self.rank()} holds {mine}"
            )
        counts = [T.nbytes(o) for o in outs]
        flat = torch.empty(sum(o.numel() for o in outs), dtype=t.dtype)
        if len(set(counts)) <= 1:
            gather = (self._group.allgather, t.data_ptr(), flat.data_ptr(), T.nbytes(t))
        else:
            gather = (self._group.allgather_v, t.data_ptr(), flat.data_ptr(), counts)

        def run():
            gather[0](*gather[1:])
            _scatter_flat(flat, outs)

        return self._run(opts, output_lists, run, nbytes=T.nbytes(flat), keep=(t, flat))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        """`all_gather_coalesced`: several tensors of any shapes gathered at once
        (`output_lists[r][i]` receives rank r's `input_list[i]`), as one allgather of bytes."""
        w = self.size()
        if len(output_lists) != w:
            raise PhalanxError(f"all_gather_coalesced: {len(output_lists)} output lists for a "
                               f"group of {w}")
        for outs in output_lists:
            if [(o.dtype, o.numel()) for o in outs] != [(i.dtype, i.numel()) for i in input_list]:
                raise PhalanxError("all_gather_coalesced: every output list must match the "
                                   "inputs' dtypes and sizes")
            for o in outs:
                T.check(o, "all_gather_coalesced")
        for i in input_list:
            T.check(i, "all_gather_coalesced")
        send = torch.cat([T.as_bytes(i) for i in input_list]) if input_list else \
            torch.empty(0, dtype=torch.uint8)
        flat = torch.empty(w * send.numel(), dtype=torch.uint8)

        def run():
            self._group.allgather(send.data_ptr(), flat.data_ptr(), send.numel())
            for r, outs in enumerate(output_lists):
                _scatter_flat(flat[r * send.numel():(r + 1) * send.numel()],
                              [T.as_bytes(o) for o in outs])

        return self._run(opts, output_lists, run, nbytes=flat.numel(), keep=(send, flat))

    def all_gather_single(self, output, input, opts=None):
        input = self._gather_input(output, input, "all_gather_into_tensor")
        return self._run(opts, [output], self._group.allgather, input.data_ptr(),
                         output.data_ptr(), T.nbytes(input), nbytes=T.nbytes(output),
                         keep=(input,))

    def _gather_input(self, output, input, what):
        """The input of an all-gather into `output`, checked; a copy when it lies in `output`
        (in place, FSDP's pattern: phalanx reads and writes apart)."""
        T.check(output, what)
        T.check(input, what)
        if output.dtype != input.dtype or output.numel() != input.numel() * self.size():
            raise PhalanxError(
                f"{what}: output {output.dtype} x {output.numel()}, expected "
                f"{input.dtype} x {input.numel()} x {self.size()}"
            )
        return input.clone() if T.overlap(input, output) else input

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        """Several `all_gather_into_tensor`s at once (FSDP's coalesced all-gather)."""
        if len(outputs) != len(inputs):
            raise PhalanxError(f"all_gather_into_tensor_coalesced: {len(outputs)} outputs for "
                               f"{len(inputs)} inputs")
        keep = [self._gather_input(o, i, "all_gather_into_tensor_coalesced")
                for o, i in zip(outputs, inputs)]
        calls = [(i.data_ptr(), o.data_ptr(), T.nbytes(i)) for o, i in zip(outputs, keep)]

        def each():
            for c in calls:
                self._group.allgather(*c)

        return self._run(opts, outputs, each, nbytes=sum(T.nbytes(o) for o in outputs),
                         keep=keep)

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        """`reduce_scatter` from a list; the blocks may differ in size (each rank's list gives
        every block's size): then phalanx's reduce_scatter_v."""
        out = T.single(output_tensors, "reduce_scatter")
        ins = T.single(input_lists, "reduce_scatter")
        T.of_dtype(ins, self.size(), out, "reduce_scatter")
        counts = [i.numel() for i in ins]
        if len(set(counts)) <= 1:
            flat = torch.cat([i.reshape(-1) for i in ins])
            return self.reduce_scatter_single(out, flat, opts, result=output_tensors)
        optr, n, dt = T.reducible(out, "reduce_scatter")
        if n != counts[self.rank()]:
            raise PhalanxError(
                f"reduce_scatter: rank {self.rank()}'s output holds {n} elements but its input "
                f"block {self.rank()} holds {counts[self.rank()]}"
            )
        op, factor = T.op_scaled(opts, "reduce_scatter", out)
        flat = torch.cat([i.reshape(-1) for i in ins])  # a copy: the inputs stay as given
        if factor is not None:
            flat.mul_(factor)
        return self._run(opts, output_tensors, self._group.reduce_scatter_v, flat.data_ptr(),
                         optr, counts, dt, op, nbytes=T.nbytes(flat), keep=(flat,))

    def _scatter_single_args(self, output, input, what):
        optr, n, dt = T.reducible(output, what)
        iptr, m, idt = T.reducible(input, what)
        if idt != dt or m != n * self.size():
            raise PhalanxError(
                f"{what}: input {input.dtype} x {m}, expected {output.dtype} x {n} x {self.size()}"
            )
        return optr, n, dt

    def reduce_scatter_single(self, output, input, opts=None, result=None):
        optr, n, dt = self._scatter_single_args(output, input, "reduce_scatter_tensor")
        op, factor = T.op_scaled(opts, "reduce_scatter", input)
        if factor is not None:
            input = input * factor  # a scaled copy: the caller's input stays as it was
        return self._run(opts, result if result is not None else [output],
                         self._group.reduce_scatter, input.data_ptr(), optr, n, dt, op,
                         nbytes=T.nbytes(input), keep=(input,))

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        """Several `reduce_scatter_tensor`s at once (FSDP's coalesced reduce-scatter)."""
        what = "reduce_scatter_tensor_coalesced"
        if len(outputs) != len(inputs):
            raise PhalanxError(f"{what}: {len(outputs)} outputs for {len(inputs)} inputs")
        calls, keep = [], []
        for o, i in zip(outputs, inputs):
            optr, n, dt = self._scatter_single_args(o, i, what)
            op, factor = T.op_scaled(opts, what, i)
            if factor is not None:
                i = i * factor
            keep.append(i)
            calls.append((i.data_ptr(), optr, n, dt, op))

        def each():
            for c in calls:
                self._group.reduce_scatter(*c)

        return self._run(opts, outputs, each, nbytes=sum(T.nbytes(i) for i in keep), keep=keep)

    def reduce(self, tensors, opts):
        t = T.single(tensors, "reduce")
        ptr, n, dt = T.reducible(t, "reduce")
        return self._run(opts, tensors, self._group.reduce, ptr, n, dt, T.op(opts, "reduce"),
                         opts.rootRank, nbytes=T.nbytes(t))

    def gather(self, output_lists, input_list, opts):
        t = T.single(input_list, "gather")
        ptr, n = T.raw(t, "gather")
        root = opts.rootRank
        if self.rank() == root:
            outs = T.single(output_lists, "gather")
            T.same(outs, self.size(), t, "gather")
            flat = torch.empty(self.size() * t.numel(), dtype=t.dtype)
        else:
            outs, flat = [], torch.empty(0, dtype=t.dtype)
        fptr = flat.data_ptr()

        def run():
            self._group.gather(ptr, fptr, n, root)
            _scatter_flat(flat, outs)

        return self._run(opts, output_lists, run, nbytes=T.nbytes(t) * self.size(), keep=(t, flat))

    def scatter(self, output_tensors, input_lists, opts):
        out = T.single(output_tensors, "scatter")
        optr, n = T.raw(out, "scatter")
        root = opts.rootRank
        if self.rank() == root:
            ins = T.single(input_lists, "scatter")
            T.same(ins, self.size(), out, "scatter")
            flat = torch.cat([i.reshape(-1) for i in ins])
        else:
            flat = torch.empty(0, dtype=out.dtype)
        return self._run(opts, output_tensors, self._group.scatter, flat.data_ptr(), optr, n,
                         root, nbytes=n * self.size(), keep=(flat,))

    def alltoall(self, output_tensors, input_tensors, opts=None):
        w = self.size()
        if len(output_tensors) != w or len(input_tensors) != w:
            raise PhalanxError(f"alltoall: needs {w} input and output tensors")
        dtypes = {t.dtype for t in list(output_tensors) + list(input_tensors)}
        if len(dtypes) != 1:
            raise PhalanxError(f"alltoall: tensors of one dtype, got {sorted(map(str, dtypes))}")
        send = torch.cat([i.reshape(-1) for i in input_tensors])
        recv = torch.empty(sum(o.numel() for o in output_tensors), dtype=send.dtype)
        size = send.element_size()
        send_splits = [i.numel() * size for i in input_tensors]
        recv_splits = [o.numel() * size for o in output_tensors]
        sptr, _ = T.raw(send, "alltoall")
        rptr = recv.data_ptr()

        def run():
            self._group.all_to_all_single(sptr, send_splits, rptr, recv_splits)
            _scatter_flat(recv, output_tensors)

        return self._run(opts, output_tensors, run, nbytes=T.nbytes(send), keep=(send, recv))

    def all_to_all_single(self, output, input, output_splits, input_splits, opts=None):
        T.check(input, "all_to_all_single")
        T.check(output, "all_to_all_single")
        if input.dtype != output.dtype:
            raise PhalanxError(f"all_to_all_single: input {input.dtype}, output {output.dtype}")
        w = self.size()
        rows_in = input.shape[0] if input.dim() else 1
        rows_out = output.shape[0] if output.dim() else 1
        row_in = input.numel() // max(rows_in, 1)
        row_out = output.numel() // max(rows_out, 1)
        ins = list(input_splits) or [rows_in // w] * w
        outs = list(output_splits) or [rows_out // w] * w
        if len(ins) != w or len(outs) != w or sum(ins) != rows_in or sum(outs) != rows_out:
            raise PhalanxError(
                f"all_to_all_single: splits {ins} (input, {rows_in} rows) and {outs} (output, "
                f"{rows_out} rows) must have {w} entries summing to the rows"
            )
        size = input.element_size()
        send_splits = [s * row_in * size for s in ins]
        recv_splits = [s * row_out * size for s in outs]
        return self._run(opts, [output], self._group.all_to_all_single, input.data_ptr(),
                         send_splits, output.data_ptr(), recv_splits, nbytes=T.nbytes(input),
                         keep=(input,))

    def barrier(self, opts=None):
        return self._run(opts, [], self._group.barrier)

    # -- point to point (_p2p.py) ----------------------------------------------------------

    def send(self, tensors, dst, tag):
        return self._p2p.send(tensors, dst, tag)

    def recv(self, tensors, src, tag):
        return self._p2p.recv(tensors, src, tag)

    def recv_anysource(self, tensors, tag):
        return self._p2p.recv_anysource(tensors, tag)


# Note [Backend lifetime]: c10d holds our backend as a C++ pointer; torch keeps the Python
# object alive with it when the backend is registered on a group, but not when it is wrapped
# first (TORCH_DISTRIBUTED_DEBUG=DETAIL wraps it in a ProcessGroupWrapper). Once Python
# collected it, the trampoline found no Python methods and DDP's first collective failed with
# "getBackendName is not implemented". Every backend stays here until c10d shuts it down.
_ALIVE = set()


def _scatter_flat(flat, outs):
    """Copies consecutive pieces of `flat` into `outs`, in order."""
    at = 0
    for o in outs:
        o.copy_(flat[at:at + o.numel()].view_as(o))
        at += o.numel()
