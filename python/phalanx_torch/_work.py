"""The `Work` handles the backend returns: `wait()` raises the operation's failure,
`get_future()` is completed with its output tensors."""

import threading

import torch
import torch.distributed as dist

from ._native import PhalanxError
from ._holder import noted


class _Failure:
    """What a failed operation's source future holds (Note [Failed futures])."""

    def __init__(self, error):
        self.error = error


def _outcome(source):
    """The value of a Work's future: its source's, or the failure raised."""
    value = source.value()
    if isinstance(value, _Failure):
        raise value.error
    return value


# Note [Failed futures]
# `torch.futures.Future.set_exception` stores the exception as the future's *value* (with an
# unwrap function that raises it in Python), so C++ consumers never see an error: DDP's
# reducer parsed the exception object as its bucket's tensors and crashed the process in
# `parseCppCommHookResult` (found under Ray, a peer SIGKILLed mid-step). From Python the only
# way to give a future a real error is a `then` callback that raises: each Work's future is
# `source.then(_outcome)`, and a failure completes the source with a `_Failure`, which
# `_outcome` raises. Python and C++ waiters alike then get the PhalanxError's text.


class Work(dist.Work):
    """A collective's handle: `wait()` returns when it is done (raising its failure), and
    `get_future()` is completed with its output tensors. It holds every tensor whose memory
    the operation uses until the operation is over (`keep`)."""

    def __init__(self, result, pending=None, error=None, keep=()):
        super().__init__()
        self._result = result
        self._pending = pending
        self._error = error
        self._keep = keep
        self._source = torch.futures.Future()
        self._future = self._source.then(_outcome)
        if pending is not None:
            pending.add_done_callback(self._finish)
        elif error is not None:
            self._source.set_result(_Failure(error))
        else:
            self._source.set_result(result)

    def _finish(self, pending):
        e = pending.exception()
        self._keep = ()
        if e is None:
            self._source.set_result(self._result)
        else:
            self._source.set_result(_Failure(e))

    def wait(self, timeout=None):
        if self._pending is not None:
            # c10d passes its kNoTimeout (zero) when the caller gave none: wait until done.
            seconds = timeout.total_seconds() if timeout is not None else 0
            try:
                self._pending.result(seconds if seconds > 0 else None)
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
        noted(self)  # Note [Work behind a holder]
        return self._future

    def result(self):
        self.wait()
        return self._result


class P2PWork(Work):
    """A held receive (Note [Deferred point-to-point]): waiting on it moves it. A receive from
    any source learns its source when it moves (`_source_rank()`)."""

    def __init__(self, mover, result, source=None):
        self._mover = mover
        self._inner = None
        self._source = source
        self._moved = threading.Event()
        super().__init__(result, pending=_Held())

    def _started(self, inner, source=None):
        if source is not None:
            self._source = source
        self._inner = inner
        self._moved.set()

    def _move(self):
        if self._inner is None:
            self._mover.flush()
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
        future = self._inner.get_future()
        noted(self)  # after the inner Work's note: Note [Work behind a holder]
        return future

    def _source_rank(self):
        """The group rank this receive's message came from (torch's `dist.recv(src=None)`
        and `work._source_rank()`)."""
        self._move()
        if self._source is None:
            raise PhalanxError("source_rank: this work is not a receive")
        return self._source

    source_rank = _source_rank


class _Held:
    """The pending side of a held point-to-point work: done when its batch is."""

    def add_done_callback(self, _):
        pass
