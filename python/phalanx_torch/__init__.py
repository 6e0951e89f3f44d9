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
"""

import threading
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist

from ._native import Group, PhalanxError

__all__ = ["ProcessGroupPhalanx", "PhalanxError"]

# Collectives up to this many bytes run on the caller's thread when the group is idle, even
# with async_op=True: they are latency-bound, and handing them to the group's thread costs
# more (about 20 us with the GIL) than it could overlap. Larger ones overlap the caller's work.
INLINE_BYTES = 1 << 20

# torch dtypes phalanx reduces; any other dtype is moved (broadcast, gather, …) as bytes.
_REDUCIBLE = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
}

_OPS = {
    "SUM": "sum",
    "AVG": "avg",
    "PRODUCT": "product",
    "MIN": "min",
    "MAX": "max",
    "BAND": "band",
    "BOR": "bor",
    "BXOR": "bxor",
}


def _check(t, what):
    if t.device.type != "cpu":
        raise PhalanxError(f"{what}: the phalanx backend takes CPU tensors, got one on {t.device}")
    if not t.is_contiguous():
        raise PhalanxError(f"{what}: the phalanx backend takes contiguous tensors (call .contiguous())")
    return t


def _reducible(t, what):
    _check(t, what)
    dt = _REDUCIBLE.get(t.dtype)
    if dt is None:
        raise PhalanxError(
            f"{what}: phalanx does not reduce {t.dtype} (it reduces "
            + ", ".join(str(d) for d in _REDUCIBLE)
            + ")"
        )
    return t.data_ptr(), t.numel(), dt


def _raw(t, what):
    """Any dtype as bytes (pointer and length), for the collectives that only move data."""
    _check(t, what)
    return t.data_ptr(), t.numel() * t.element_size()


def _op(opts, what):
    name = opts.reduceOp.op.name if hasattr(opts.reduceOp, "op") else str(opts.reduceOp)
    name = name.split(".")[-1]
    op = _OPS.get(name)
    if op is None:
        raise PhalanxError(f"{what}: phalanx has no reduce op {name} (it has {', '.join(_OPS)})")
    return op


def _op_scaled(opts, what, t):
    """The op for a reduction of `t` that PREMUL_SUM may ask for: PyTorch's
    `_make_nccl_premul_sum(factor)` is a SUM of every rank's values multiplied by `factor`
    first. Returns (op, factor), factor None for any other op."""
    if opts is None:
        return "sum", None
    name = opts.reduceOp.op.name if hasattr(opts.reduceOp, "op") else str(opts.reduceOp)
    if name.split(".")[-1] != "PREMUL_SUM":
        return _op(opts, what), None
    factor = getattr(opts.reduceOp, "factor", None)
    if factor is None:
        raise PhalanxError(f"{what}: PREMUL_SUM without a factor")
    if not t.is_floating_point():
        raise PhalanxError(f"{what}: PREMUL_SUM scales floating-point tensors, not {t.dtype}")
    return "sum", factor.item() if isinstance(factor, torch.Tensor) else float(factor)


def _bytes(t):
    return t.numel() * t.element_size()


def _same(tensors, count, like, what):
    """`count` tensors, each of `like`'s dtype and element count."""
    if len(tensors) != count:
        raise PhalanxError(f"{what}: {len(tensors)} tensors for a group of {count}")
    for t in tensors:
        if t.dtype != like.dtype or t.numel() != like.numel():
            raise PhalanxError(
                f"{what}: every tensor must be {like.dtype} x {like.numel()}, got {t.dtype} x "
                f"{t.numel()}"
            )


def _overlap(a, b):
    """Whether two tensors' memory overlaps."""
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + _bytes(b) and b0 < a0 + _bytes(a) and _bytes(a) and _bytes(b)


def _single(tensors, what):
    if len(tensors) != 1:
        raise PhalanxError(f"{what}: the phalanx backend takes one tensor per rank, got {len(tensors)}")
    return tensors[0]


class _Work(dist.Work):
    """A collective's handle: `wait()` returns when it is done (raising its failure), and
    `get_future()` is completed with its output tensors. It holds every tensor whose memory
    the operation uses until the operation is over (`keep`)."""

    def __init__(self, result, pending=None, error=None, keep=()):
        super().__init__()
        self._result = result
        self._pending = pending
        self._error = error
        self._keep = keep
        self._future = torch.futures.Future()
        if pending is not None:
            pending.add_done_callback(self._finish)
        elif error is not None:
            self._future.set_exception(error)
        else:
            self._future.set_result(result)

    def _finish(self, pending):
        e = pending.exception()
        self._keep = ()
        if e is None:
            self._future.set_result(self._result)
        else:
            self._future.set_exception(e)

    def wait(self, timeout=None):
        if self._pending is not None:
            try:
                self._pending.result(None if timeout is None else timeout.total_seconds())
            except TimeoutError:
                raise PhalanxError(f"Work.wait: not done after {timeout}") from None
        elif self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        return self._pending is None or self._pending.done()

    def is_success(self):
        return self.is_completed() and self.exception() is None

    def exception(self):
        if self._pending is None:
            return self._error
        return self._pending.exception() if self._pending.done() else None

    def get_future(self):
        return self._future

    def result(self):
        self.wait()
        return self._result


class ProcessGroupPhalanx(dist.ProcessGroup):
    """The ``"phalanx"`` backend: one phalanx process group for CPU tensors.

    Collectives run in the order they are called, one at a time, on one thread of this group:
    ``async_op=True`` returns at once and the work completes there; a blocking call on an idle
    group runs on the caller's thread (no hand-off).
    """

    def __init__(self, store, rank, world_size, timeout):
        super().__init__(rank, world_size)
        seconds = timeout.total_seconds() if timeout is not None else 1800.0
        self._group = Group(store, rank, world_size, seconds)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="phalanx")
        self._lock = threading.Lock()
        self._queued = 0
        self._held = []  # Note [Deferred point-to-point]

    # -- execution ---------------------------------------------------------------------------

    def _run(self, opts, result, fn, *args, nbytes=0, keep=()):
        """Runs `fn(*args)` in call order: on the caller's thread when the group is idle and
        the operation is small or blocking, else on the group's thread. `keep`: tensors whose
        memory `fn` uses beyond `result`, held until it is done."""
        if self._held:
            self._flush()
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
                return _Work(result, error=e)  # async_op: the failure comes from wait()
            finally:
                with self._lock:
                    self._queued -= 1
            return _Work(result)

        def job():
            try:
                fn(*args)
            finally:
                with self._lock:
                    self._queued -= 1

        return _Work(result, self._executor.submit(job), keep=(result, keep))

    # -- identity ----------------------------------------------------------------------------

    def getBackendName(self):
        return "phalanx"

    def _get_backend(self, device):
        # This group is its own backend for CPU tensors (torch asks, e.g. batch_isend_irecv).
        return self

    def abort(self):
        self._group.abort("the process group was aborted")

    def shutdown(self):
        self._executor.shutdown(wait=True)

    # -- collectives -------------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        t = _single(tensors, "allreduce")
        ptr, n, dt = _reducible(t, "allreduce")
        op, factor = _op_scaled(opts, "allreduce", t)
        if factor is not None:
            t.mul_(factor)  # the output is the input: scaled in place, then summed
        return self._run(opts, tensors, self._group.allreduce, ptr, n, dt, op, nbytes=_bytes(t))

    def allreduce_coalesced(self, tensors, opts=None):
        op = _op(opts, "allreduce_coalesced") if opts is not None else "sum"
        calls = [_reducible(t, "allreduce_coalesced") + (op,) for t in tensors]

        def each():
            for c in calls:
                self._group.allreduce(*c)

        return self._run(opts, tensors, each, nbytes=sum(_bytes(t) for t in tensors))

    def broadcast(self, tensors, opts):
        t = _single(tensors, "broadcast")
        ptr, n = _raw(t, "broadcast")
        return self._run(opts, tensors, self._group.broadcast, ptr, n, opts.rootRank, nbytes=n)

    def allgather(self, output_lists, input_list, opts=None):
        t = _single(input_list, "allgather")
        outs = _single(output_lists, "allgather")
        _same(outs, self.size(), t, "all_gather")
        ptr, n = _raw(t, "allgather")
        flat = torch.empty(self.size() * t.numel(), dtype=t.dtype)
        fptr = flat.data_ptr()

        def run():
            self._group.allgather(ptr, fptr, n)
            for r, o in enumerate(outs):
                o.copy_(flat[r * t.numel() : (r + 1) * t.numel()].view_as(o))

        return self._run(opts, output_lists, run, nbytes=_bytes(flat), keep=(t, flat))

    def all_gather_single(self, output, input, opts=None):
        _check(output, "all_gather_into_tensor")
        if output.dtype != input.dtype or output.numel() != input.numel() * self.size():
            raise PhalanxError(
                f"all_gather_into_tensor: output {output.dtype} x {output.numel()}, expected "
                f"{input.dtype} x {input.numel()} x {self.size()}"
            )
        if _overlap(input, output):
            input = input.clone()  # in place (FSDP's pattern): phalanx reads and writes apart
        ptr, n = _raw(input, "all_gather_into_tensor")
        return self._run(opts, [output], self._group.allgather, ptr, output.data_ptr(), n,
                         nbytes=_bytes(output), keep=(input,))

    _allgather_base = all_gather_single

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        out = _single(output_tensors, "reduce_scatter")
        ins = _single(input_lists, "reduce_scatter")
        _same(ins, self.size(), out, "reduce_scatter")
        flat = torch.cat([i.reshape(-1) for i in ins])
        return self.reduce_scatter_single(out, flat, opts, result=output_tensors)

    def reduce_scatter_single(self, output, input, opts=None, result=None):
        optr, n, dt = _reducible(output, "reduce_scatter_tensor")
        iptr, m, idt = _reducible(input, "reduce_scatter_tensor")
        if idt != dt or m != n * self.size():
            raise PhalanxError(
                f"reduce_scatter_tensor: input {input.dtype} x {m}, expected {output.dtype} x "
                f"{n} x {self.size()}"
            )
        op, factor = _op_scaled(opts, "reduce_scatter", input)
        if factor is not None:
            input = input * factor  # a scaled copy: the caller's input stays as it was
            iptr = input.data_ptr()
        return self._run(opts, result if result is not None else [output],
                         self._group.reduce_scatter, iptr, optr, n, dt, op, nbytes=_bytes(input),
                         keep=(input,))

    _reduce_scatter_base = reduce_scatter_single

    def reduce(self, tensors, opts):
        t = _single(tensors, "reduce")
        ptr, n, dt = _reducible(t, "reduce")
        return self._run(opts, tensors, self._group.reduce, ptr, n, dt, _op(opts, "reduce"),
                         opts.rootRank, nbytes=_bytes(t))

    def gather(self, output_lists, input_list, opts):
        t = _single(input_list, "gather")
        ptr, n = _raw(t, "gather")
        root = opts.rootRank
        if self.rank() == root:
            outs = _single(output_lists, "gather")
            _same(outs, self.size(), t, "gather")
            flat = torch.empty(self.size() * t.numel(), dtype=t.dtype)
        else:
            outs, flat = [], torch.empty(0, dtype=t.dtype)
        fptr = flat.data_ptr()

        def run():
            self._group.gather(ptr, fptr, n, root)
            for r, o in enumerate(outs):
                o.copy_(flat[r * t.numel() : (r + 1) * t.numel()].view_as(o))

        return self._run(opts, output_lists, run, nbytes=_bytes(t) * self.size(), keep=(t, flat))

    def scatter(self, output_tensors, input_lists, opts):
        out = _single(output_tensors, "scatter")
        optr, n = _raw(out, "scatter")
        root = opts.rootRank
        if self.rank() == root:
            ins = _single(input_lists, "scatter")
            _same(ins, self.size(), out, "scatter")
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
        sptr, _ = _raw(send, "alltoall")
        rptr = recv.data_ptr()

        def run():
            self._group.all_to_all_single(sptr, send_splits, rptr, recv_splits)
            at = 0
            for o in output_tensors:
                o.copy_(recv[at : at + o.numel()].view_as(o))
                at += o.numel()

        return self._run(opts, output_tensors, run, nbytes=_bytes(send), keep=(send, recv))

    def all_to_all_single(self, output, input, output_splits, input_splits, opts=None):
        _check(input, "all_to_all_single")
        _check(output, "all_to_all_single")
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
                         send_splits, output.data_ptr(), recv_splits, nbytes=_bytes(input),
                         keep=(input,))

    alltoall_base = all_to_all_single

    def barrier(self, opts=None):
        return self._run(opts, [], self._group.barrier)

    # -- point to point -------------------------------------------------------------------
    # Note [Deferred point-to-point]: phalanx runs a group's operations one at a time, so an
    # irecv run at once would block before the matching isend of the same rank is even
    # posted (a ring of `irecv; isend; wait` would hang). Sends and receives are therefore
    # held until something needs them: waiting on any of them, or the next collective. Then
    # all held ones move together (phalanx's batch_isend_irecv, every direction at once), in
    # order with the collectives around them. What this cannot do, where Gloo can: a receive
    # still held when the next collective starts completes before it, so a peer that sends
    # only after that collective makes both wait until the timeout (which names the peer).

    def send(self, tensors, dst, tag):
        return self._post(True, _single(tensors, "send"), dst, tag)

    def recv(self, tensors, src, tag):
        return self._post(False, _single(tensors, "recv"), src, tag)

    def _post(self, is_send, t, peer, tag):
        ptr, n = _raw(t, "send" if is_send else "recv")
        work = _P2PWork(self, [t])
        with self._lock:
            self._held.append(((is_send, ptr, n, peer, tag), t, work))
        return work

    def _flush(self):
        with self._lock:
            held, self._held = self._held, []
        if not held:
            return
        ops = [op for op, _, _ in held]
        keep = [t for _, t, _ in held]
        inner = self._run(None, keep, self._group.p2p_batch, ops)
        for _, _, work in held:
            work._started(inner)


class _P2PWork(_Work):
    """A held send or receive (Note [Deferred point-to-point]): waiting on it moves it."""

    def __init__(self, group, result):
        self._group_ref = group
        self._inner = None
        self._moved = threading.Event()
        super().__init__(result, pending=_Held())

    def _started(self, inner):
        self._inner = inner
        self._moved.set()

    def _move(self):
        if self._inner is None:
            self._group_ref._flush()
            self._moved.wait()  # another thread's flush may be handing it over

    def wait(self, timeout=None):
        self._move()
        return self._inner.wait(timeout)

    def is_completed(self):
        self._move()
        return self._inner.is_completed()

    def is_success(self):
        self._move()
        return self._inner.is_success()

    def exception(self):
        self._move()
        return self._inner.exception()

    def get_future(self):
        self._move()
        return self._inner.get_future()


class _Held:
    """The pending side of a held point-to-point work: done when its batch is."""

    def add_done_callback(self, _):
        pass


def _create(store, rank, world_size, timeout):
    return ProcessGroupPhalanx(store, rank, world_size, timeout)


if "phalanx" not in dist.Backend.backend_list:
    dist.Backend.register_backend("phalanx", _create, devices=["cpu"])
