"""Checks of the tensors PyTorch hands the backend, and what phalanx is told about them: a data
pointer, a count, a dtype name. Every refusal is a ``PhalanxError`` naming the collective and
the fix."""

import torch
import torch.distributed as dist

from ._native import PhalanxError

# torch dtypes phalanx reduces; any other dtype is moved (broadcast, gather, …) as bytes.
REDUCIBLE = {
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


def check(t, what):
    if t.device.type != "cpu":
        raise PhalanxError(f"{what}: the phalanx backend takes CPU tensors, got one on {t.device}")
    if t.layout != torch.strided:
        raise PhalanxError(f"{what}: the phalanx backend takes dense tensors here, got {t.layout}")
    if not t.is_contiguous():
        raise PhalanxError(f"{what}: the phalanx backend takes contiguous tensors (call .contiguous())")
    return t


def reducible(t, what):
    """Pointer, element count and phalanx's dtype name of a tensor phalanx reduces."""
    check(t, what)
    dt = REDUCIBLE.get(t.dtype)
    if dt is None:
        raise PhalanxError(
            f"{what}: phalanx does not reduce {t.dtype} (it reduces "
            + ", ".join(str(d) for d in REDUCIBLE)
            + ")"
        )
    return t.data_ptr(), t.numel(), dt


def raw(t, what):
    """Any dtype as bytes (pointer and length), for the collectives that only move data."""
    check(t, what)
    return t.data_ptr(), nbytes(t)


def nbytes(t):
    return t.numel() * t.element_size()


def as_bytes(t):
    """A contiguous tensor's memory as a flat uint8 view (any dtype, complex included)."""
    flat = t.reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)


# The same, by torch's enum member (a dict lookup: reading an enum's name costs microseconds).
_OPS_BY_TYPE = {getattr(dist.ReduceOp.RedOpType, k): v for k, v in _OPS.items()}
_PREMUL_SUM = dist.ReduceOp.RedOpType.PREMUL_SUM


def _op_type(reduce_op):
    return reduce_op.op if hasattr(reduce_op, "op") else reduce_op


def op(opts, what):
    if opts is None:
        return "sum"
    return _op_of(_op_type(opts.reduceOp), what)


def _op_of(kind, what):
    found = _OPS_BY_TYPE.get(kind)
    if found is None:
        name = str(kind).split(".")[-1]
        raise PhalanxError(f"{what}: phalanx has no reduce op {name} (it has {', '.join(_OPS)})")
    return found


def op_scaled(opts, what, t):
    """The op for a reduction of `t` that PREMUL_SUM may ask for: PyTorch's
    `_make_nccl_premul_sum(factor)` is a SUM of every rank's values multiplied by `factor`
    first. Returns (op, factor), factor None for any other op."""
    if opts is None:
        return "sum", None
    reduce_op = opts.reduceOp
    kind = _op_type(reduce_op)
    if kind != _PREMUL_SUM:
        return _op_of(kind, what), None
    factor = getattr(reduce_op, "factor", None)
    if factor is None:
        raise PhalanxError(f"{what}: PREMUL_SUM without a factor")
    if not t.is_floating_point():
        raise PhalanxError(f"{what}: PREMUL_SUM scales floating-point tensors, not {t.dtype}")
    return "sum", factor.item() if isinstance(factor, torch.Tensor) else float(factor)


def same(tensors, count, like, what):
    """`count` tensors, each of `like`'s dtype and element count."""
    of_dtype(tensors, count, like, what)
    for t in tensors:
        if t.numel() != like.numel():
            raise PhalanxError(
                f"{what}: every tensor must be {like.dtype} x {like.numel()}, got {t.dtype} x "
                f"{t.numel()}"
            )


def of_dtype(tensors, count, like, what):
    """`count` contiguous CPU tensors of `like`'s dtype (sizes free: the `_v` forms)."""
    if len(tensors) != count:
        raise PhalanxError(f"{what}: {len(tensors)} tensors for a group of {count}")
    for t in tensors:
        check(t, what)
        if t.dtype != like.dtype:
            raise PhalanxError(f"{what}: every tensor must be {like.dtype}, got {t.dtype}")


def overlap(a, b):
    """Whether two tensors' memory overlaps."""
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + nbytes(b) and b0 < a0 + nbytes(a) and nbytes(a) and nbytes(b)


def single(tensors, what):
    if len(tensors) != 1:
        raise PhalanxError(f"{what}: the phalanx backend takes one tensor per rank, got {len(tensors)}")
    return tensors[0]
