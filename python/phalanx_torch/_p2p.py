"""Point-to-point operations of one backend: sends at once, held receives, and receives from
any source.

Note [Deferred point-to-point]: phalanx runs a group's operations one at a time, so an irecv
run at once would block before the matching isend of the same rank is even posted (a ring of
`irecv; isend; wait` would hang). Receives are therefore held until something waits on one of
them; then all held ones move together (phalanx's batch_isend_irecv), after the operations
issued before. A send goes at once, in order with the group's collectives: once it has
started, it completes whatever its peer does, because every group here runs its background
progress (Note [Background progress] in phalanx-transport): a thread that reads the peers'
frames while no operation of the group runs, a collective that waits reads them too, and a
point-to-point step that waits always did. The receiver holds such messages in memory until
their receive (no back-pressure, as an MPI library's eager messages; Gloo's sender instead
waits on a thread of its own for the receive to be posted). What a send still waits for is
this rank's own operations issued before it on the group, which run first (an asynchronous
collective whose peer enters it only after this send arrived waits out the timeout, where
Gloo's send would go on its own). So a pipeline's second stage starts on the first microbatch the
first stage sends, not after the last one (GPipe waits on its sends only at the end), and a
receive held past a collective does not wait for it: a peer that sends only after that
collective is received from when the receive is waited on. (Before, sends were held too, and
every held operation moved before the next collective: GPipe's stages ran one after the other,
and a receive posted before a collective whose peer sent after it waited out the timeout.)

Note [Receive from any source]: phalanx's transport receives from a named peer. So that a
receive from any source (`dist.recv(t)` without `src`) can name one, every send is announced
in the group's store: a counter per (destination, source, tag), added to by a thread of its
own so that the sender never waits for the store. This rank counts what it has received from
each (source, tag); a receive from any source waits until some source's counter is ahead of
what this rank received from it (the lowest such rank), then receives from that source like
any other receive. Messages of one pair still arrive in the order sent, and a receive naming
its source counts too, so the counters stay in step.
"""

import atexit
import queue
import threading
import time

from ._native import PhalanxError
from ._tensors import raw, single
from ._work import P2PWork, Work

# How often a receive from any source looks at the store, at first and at most.
_POLL_FIRST_S = 0.0005
_POLL_MAX_S = 0.02


def _announced(dst, src, tag):
    return f"phalanx/p2p/{dst}/{src}/{tag}"


class PointToPoint:
    """Sends and held receives of one backend (`run` runs a job in the backend's order)."""

    def __init__(self, native, store, run):
        self._native = native
        self._store = store
        self._run = run
        self._lock = threading.Lock()
        self._held = []  # receives: (tensor, peer or None, tag, work)
        self._received = {}  # (source, tag) -> messages received from it
        self._announcer = None

    def send(self, tensors, dst, tag):
        t = single(tensors, "send")
        raw(t, "send")
        self._announce(dst, tag)
        n = t.numel() * t.element_size()
        return self._run(None, [t], self._native.p2p_batch, [(True, t.data_ptr(), n, dst, tag)],
                         nbytes=n, collective=False)

    def recv(self, tensors, src, tag):
        t = single(tensors, "recv")
        raw(t, "recv")
        return self._hold(t, src, tag)

    def recv_anysource(self, tensors, tag):
        t = single(tensors, "recv from any source")
        raw(t, "recv from any source")
        return self._hold(t, None, tag)

    def _hold(self, t, peer, tag):
        work = P2PWork(self, [t], source=peer)
        with self._lock:
            self._held.append((t, peer, tag, work))
        return work

    def _announce(self, dst, tag):
        if self._announcer is None:
            self._announcer = _Announcer(self._store)
        self._announcer.put(_announced(dst, self._native.rank, tag))

    def flush(self):
        """Moves every held receive, in one batch (Note [Deferred point-to-point])."""
        with self._lock:
            held, self._held = self._held, []
        if not held:
            return
        try:
            sources = [self._source(peer, tag) for _, peer, tag, _ in held]
        except PhalanxError as e:
            for *_, work in held:
                work._started(Work([], error=e))
            return
        ops = [(False, t.data_ptr(), t.numel() * t.element_size(), peer, tag)
               for (t, _, tag, _), peer in zip(held, sources)]
        keep = [t for t, _, _, _ in held]
        inner = self._run(None, keep, self._native.p2p_batch, ops, collective=False)
        for (_, _, _, work), peer in zip(held, sources):
            work._started(inner, peer)

    def _source(self, peer, tag):
        """The source of a receive: its peer, or for a receive from any source the lowest rank
        whose announced sends with `tag` are ahead of what came from it (Note [Receive from any
        source]); counted as received."""
        if peer is None:
            peer = self._wait_for_sender(tag)
        self._received[(peer, tag)] = self._received.get((peer, tag), 0) + 1
        return peer

    def _wait_for_sender(self, tag):
        me, world = self._native.rank, self._native.world_size
        others = [r for r in range(world) if r != me]
        timeout = self._native.timeout_s
        deadline = time.monotonic() + timeout
        pause = _POLL_FIRST_S
        while True:
            for src in others:
                if self._store.add(_announced(me, src, tag), 0) > self._received.get((src, tag), 0):
                    return src
            if time.monotonic() >= deadline:
                raise PhalanxError(
                    f"rank {me}: recv from any source (tag {tag}): none of ranks {others} sent "
                    f"this rank a message with that tag within {timeout:g} s"
                )
            time.sleep(pause)
            pause = min(2 * pause, _POLL_MAX_S)

    def close(self):
        if self._announcer is not None:
            self._announcer.close()


class _Announcer:
    """A thread that adds to the store's send counters (Note [Receive from any source]), so
    that a send never waits for the store."""

    def __init__(self, store):
        self._store = store
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="phalanx-announce", daemon=True)
        self._thread.start()
        atexit.register(self.close)  # a send's announcement outlives a script that exits

    def put(self, key):
        self._queue.put(key)

    def _loop(self):
        while True:
            # Every announcement queued meanwhile, one store call per counter.
            counts, last = {}, False
            key = self._queue.get()
            while True:
                if key is None:
                    last = True
                else:
                    counts[key] = counts.get(key, 0) + 1
                try:
                    key = self._queue.get_nowait()
                except queue.Empty:
                    break
            try:
                for k, n in counts.items():
                    self._store.add(k, n)
            except Exception:  # noqa: BLE001 - the store is gone: the job is ending
                return
            if last:
                return

    def close(self):
        """Waits until every announcement is in the store."""
        if not self._thread.is_alive():
            return
        self._queue.put(None)
        self._thread.join(timeout=5)
