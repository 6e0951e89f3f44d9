"""Where torch 2.15's pybind trampoline for Python backends loses an answer, a phalanx group
gives it; every other backend's groups and works keep torch's own methods, unchanged.

Note [Work behind a holder]: c10d wraps the Work a Python backend returns in a C++ holder
(`PyWorkHolder`) that forwards `wait()` and `get_future()` only: its `is_completed()` stays
False for ever, `exception()` None, and `_source_rank()` (which `dist.recv(t)` without `src`
needs) raises "may only be called on work objects that correspond to a recv". Asking the
holder for its future calls our Work's `get_future`, which notes itself (per thread); so these
methods of `Work` first ask torch, and when torch has no answer and a phalanx Work is behind
the holder, ask that Work.

Note [A rank outside a split]: c10d asks the backend of every rank of the parent to `split`,
and a rank outside the new group is to answer "no backend" (nullptr); the trampoline turns a
Python `None` into a null pointer that it then dereferences (a segmentation fault). So for a
phalanx parent, a rank outside every group of `dist.split_group` gets `None` (torch's
NON_GROUP_MEMBER) before c10d asks its backend.
"""

import torch
from torch._C._distributed_c10d import ProcessGroup, Work

from ._backend import PhalanxBackend
from ._holder import asked
from ._work import Work as PhalanxWork


def _behind(holder):
    """The phalanx Work behind a C++ holder, or None (another backend's work)."""
    if isinstance(holder, PhalanxWork):
        return holder
    return asked(holder)


def _is_completed(self):
    if _torch["is_completed"](self):
        return True
    ours = _behind(self)
    return ours is not None and ours.is_completed()


def _exception(self):
    ours = _behind(self)
    return ours.exception() if ours is not None else _torch["exception"](self)


def _is_success(self):
    ours = _behind(self)
    return ours.is_success() if ours is not None else _torch["is_success"](self)


def _source_rank(self):
    ours = _behind(self)
    return ours._source_rank() if ours is not None else _torch["_source_rank"](self)


_torch = {}


def _phalanx_backend(pg):
    try:
        backend = pg._get_backend(torch.device("cpu"))
    except RuntimeError:  # no CPU backend
        return None
    return backend if isinstance(backend, PhalanxBackend) else None


def _split_group(self, new_ranks, *args, **kwargs):
    backend = _phalanx_backend(self)
    if backend is not None and backend.rank() not in new_ranks:
        return None
    return _torch["split_group"](self, new_ranks, *args, **kwargs)


def install():
    for name, fn in (("is_completed", _is_completed), ("exception", _exception),
                     ("is_success", _is_success), ("_source_rank", _source_rank),
                     ("source_rank", _source_rank)):
        _torch[name] = getattr(Work, name)
        setattr(Work, name, fn)
    _torch["split_group"] = ProcessGroup.split_group
    ProcessGroup.split_group = _split_group
