"""Which phalanx `Work` is behind c10d's C++ work holder (Note [Work behind a holder] in
`_shims.py`): our Work's `get_future` notes itself here, per thread, and the shims ask a
holder for its future to read the note. A leaf: `_work` notes, `_shims` asks, neither
imports the other for it."""

import threading

_asked = threading.local()


def noted(work):
    """Called by our Work's `get_future`: the Work a holder on this thread leads to."""
    _asked.work = work


def asked(holder):
    """The phalanx Work that noted itself while `holder` was asked for its future, or None
    (another backend's work, or a work without a future)."""
    _asked.work = None
    try:
        holder.get_future()
    except RuntimeError:  # a work without a future
        return None
    found, _asked.work = _asked.work, None
    return found
