"""Two methods of c10d's `ProcessGroup` that a group whose CPU backend is phalanx answers itself,
because torch 2.15's pybind trampoline for Python backends cannot carry the answer; every other
group keeps torch's own method.

Note [Source rank of an any-source receive]: the trampoline wraps the Work a Python backend
returns in a C++ holder that answers `_source_rank()` with "may only be called on work objects
that correspond to a recv", so `dist.recv(t)` without `src` could not learn the sender. Our
`recv_anysource` Work knows its source, so it is handed out itself.

Note [A rank outside a split]: c10d asks the backend of every rank of the parent to `split`,
and a rank outside the new group is to answer "no backend" (nullptr); the trampoline turns a
Python `None` into a null pointer that it then dereferences (a segmentation fault). So a rank
outside every group of `dist.split_group` gets `None` (torch's NON_GROUP_MEMBER) before c10d
asks its backend.
"""

import torch
from torch._C._distributed_c10d import ProcessGroup

_torch_recv_anysource = ProcessGroup.recv_anysource
_torch_split_group = ProcessGroup.split_group


def _phalanx(pg):
    """`pg`'s CPU backend when it is phalanx's, else None."""
    from ._backend import PhalanxBackend

    try:
        backend = pg._get_backend(torch.device("cpu"))
    except RuntimeError:  # no CPU backend
        return None
    return backend if isinstance(backend, PhalanxBackend) else None


def _recv_anysource(self, tensors, tag):
    backend = _phalanx(self)
    if backend is not None:
        return backend.recv_anysource(tensors, tag)
    return _torch_recv_anysource(self, tensors, tag)


def _split_group(self, new_ranks, *args, **kwargs):
    backend = _phalanx(self)
    if backend is not None and backend.rank() not in new_ranks:
        return None
    return _torch_split_group(self, new_ranks, *args, **kwargs)


def install():
    ProcessGroup.recv_anysource = _recv_anysource
    ProcessGroup.split_group = _split_group
