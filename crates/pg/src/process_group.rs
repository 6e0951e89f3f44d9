//! [`ProcessGroup`]: collectives over the mesh, blocking or asynchronous, failing fast.
//!
//! Note [Issue order]: every collective gets the next sequence number of the group when it
//! runs, and runs in the order it was issued: asynchronous ones are queued to one worker
//! thread; a blocking one waits until the queue is empty and then runs inline in the caller
//! (saving the ~50 µs of waking a thread, which matters for small messages).
//!
//! Note [Fail fast]: the first error of any collective breaks the group. Its root cause is
//! worked out (a peer's abort message, or the reason a dead peer published in the store),
//! published under `error/<rank>` when this rank is the origin, and sent to every peer in an
//! abort frame before the connections close, so every rank fails its pending collectives at
//! once with the same root cause instead of waiting for a timeout.

use std::{
    sync::{mpsc, Arc, Mutex},
    thread,
};

use phalanx_collectives::Options;
use phalanx_core::{trace, Element, ReduceOp};
use phalanx_store::{Store, StoreServer};
use phalanx_transport::{
    shm::{ShmAbortHandle, ShmGroup},
    AbortHandle, Transport,
};

#[cfg(feature = "nccl")]
use crate::DeviceSlice;
use crate::{
    exec::{Exec, Links},
    pending::Pending,
    progress::Progress,
    shared::{Shared, Step},
    work::Work,
    Error, Result,
};

type Job = Box<dyn FnOnce(&Shared) + Send>;

/// A group of ranks that run collectives together.
pub struct ProcessGroup {
    pub(crate) shared: Arc<Shared>,
    queue: Mutex<Option<mpsc::Sender<Job>>>,
    worker: Mutex<Option<thread::JoinHandle<()>>>,
    pending: Arc<Pending>,
    // Kept alive for the group's lifetime when this rank hosts the store.
    _server: Option<StoreServer>,
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("rank", &self.shared.rank)
            .field("world_size", &self.shared.world_size)
            .finish_non_exhaustive()
    }
}

/// Where this rank sits, for [`ProcessGroup::new`].
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    /// Global rank.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// Rank on this host.
    pub local_rank: usize,
    /// Ranks on this host.
    pub local_world_size: usize,
    /// Rank of this host's launcher agent (ranks share memory only within one node).
    pub node_rank: usize,
}

impl ProcessGroup {
    /// Wraps a connected transport. `store` is the job's (prefixed) store, used to publish
    /// and read failure reasons; `server` is kept alive when this rank hosts it.
    pub fn new(
        placement: Placement,
        transport: Box<dyn Transport>,
        shm: Option<ShmGroup>,
        abort: AbortHandle,
        store: Arc<dyn Store>,
        server: Option<StoreServer>,
        opts: Options,
    ) -> ProcessGroup {
        let shm_abort = shm.as_ref().map(ShmGroup::abort_handle);
        let links = Links::Native { transport, shm };
        ProcessGroup::with_links(placement, links, abort, shm_abort, store, server, opts)
    }

    /// A group over any backend (Note [Backends] in exec.rs).
    pub(crate) fn with_links(
        placement: Placement,
        links: Links,
        abort: AbortHandle,
        shm_abort: Option<ShmAbortHandle>,
        store: Arc<dyn Store>,
        server: Option<StoreServer>,
        opts: Options,
    ) -> ProcessGroup {
        #[cfg(feature = "mpi")]
        let mpi = matches!(links, Links::Mpi(_));
        ProcessGroup {
            shared: Arc::new(Shared {
                #[cfg(feature = "mpi")]
                mpi,
                rank: placement.rank,
                world_size: placement.world_size,
                local_rank: placement.local_rank,
                local_world_size: placement.local_world_size,
                shm_abort,
                exec: Mutex::new(Exec { links, seq: 0 }),
                store,
                abort,
                failed: Mutex::new(None),
                progress: Progress::default(),
                opts,
                reported: Mutex::new(Vec::new()),
            }),
            queue: Mutex::new(None),
            worker: Mutex::new(None),
            pending: Arc::new(Pending::default()),
            _server: server,
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.shared.rank
    }
    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.shared.world_size
    }
    /// Rank on this host.
    pub fn local_rank(&self) -> usize {
        self.shared.local_rank
    }
    /// Ranks on this host.
    pub fn local_world_size(&self) -> usize {
        self.shared.local_world_size
    }
    /// The job's store (already namespaced for this round).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.shared.store
    }
    /// Whether this group joined shared memory (every rank on one host, segments mapped):
    /// allreduce, broadcast and barrier then go through `/dev/shm` instead of TCP.
    pub fn uses_shared_memory(&self) -> bool {
        self.shared.shm_abort.is_some()
    }

    /// Reduces `buf` across ranks in place.
    pub fn allreduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let bytes = std::mem::size_of_val(buf);
        self.blocking("allreduce", bytes, |s, t, seq| {
            Ok(((), t.allreduce(seq, buf, op, &s.opts)?))
        })
    }

    /// Starts an allreduce of `buf`; the reduced buffer comes back from [`Work::wait`].
    pub fn allreduce_async<T: Element>(&self, mut buf: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        let bytes = std::mem::size_of_val(&buf[..]);
        self.enqueue("allreduce", bytes, move |s, t, seq| {
            let algo = t.allreduce(seq, &mut buf, op, &s.opts)?;
            Ok((buf, algo))
        })
    }

    /// Copies `root`'s `buf` to every rank.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        self.check_rank(root, "broadcast root")?;
        let bytes = std::mem::size_of_val(buf);
        self.blocking("broadcast", bytes, |s, t, seq| {
            Ok(((), t.broadcast(seq, buf, root, &s.opts)?))
        })
    }

    /// Gathers every rank's `send`; `recv.len()` must be `send.len() * world_size`.
    pub fn allgather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        if recv.len() != send.len() * self.world_size() {
            return Err(self.usage(format!(
                "allgather: recv holds {} elements, expected send.len() × world_size = {}",
                recv.len(),
                send.len() * self.world_size()
            )));
        }
        let bytes = std::mem::size_of_val(recv);
        self.blocking("allgather", bytes, |s, t, seq| {
            Ok(((), t.allgather(seq, send, recv, &s.opts)?))
        })
    }

    /// Reduces `send` (world_size blocks of `recv.len()`) and leaves block `rank` in `recv`.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &mut [T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        if send.len() != recv.len() * self.world_size() {
            return Err(self.usage(format!(
                "reduce_scatter: send holds {} elements, expected recv.len() × world_size = {}",
                send.len(),
                recv.len() * self.world_size()
            )));
        }
        let bytes = std::mem::size_of_val(send);
        self.blocking("reduce_scatter", bytes, |s, t, seq| {
            Ok(((), t.reduce_scatter(seq, send, recv, op, &s.opts)?))
        })
    }

    /// Returns when every rank has called it.
    pub fn barrier(&self) -> Result<()> {
        self.blocking("barrier", 0, |_, t, seq| Ok(((), t.barrier(seq)?)))
    }

    /// Sends `buf` to `peer`. Like every collective here it takes a group sequence number,
    /// so all ranks must issue their point-to-point calls in the same order relative to
    /// collectives; `tag` must match the receiver's.
    pub fn send<T: Element>(&self, buf: &[T], peer: usize, tag: u32) -> Result<()> {
        self.check_rank(peer, "send peer")?;
        let bytes = std::mem::size_of_val(buf);
        self.blocking("send", bytes, |_, t, seq| {
            Ok(((), t.send(seq, buf, peer, tag)?))
        })
    }

    /// Receives into `buf` from `peer`.
    pub fn recv<T: Element>(&self, buf: &mut [T], peer: usize, tag: u32) -> Result<()> {
        self.check_rank(peer, "recv peer")?;
        let bytes = std::mem::size_of_val(buf);
        self.blocking("recv", bytes, |_, t, seq| {
            Ok(((), t.recv(seq, buf, peer, tag)?))
        })
    }

    /// Declares this rank failed: publishes `reason` to the store (where the launcher and
    /// the other ranks read it) and aborts every connection so peers stop at once.
    pub fn abort(&self, reason: &str) {
        self.shared.fail(reason, true);
    }

    /// Turns a panic anywhere in this process into [`abort`](Self::abort) with
    /// `rank N failed: panic: MESSAGE at FILE:LINE`, so that the launcher and the other ranks
    /// name this rank and the panic's place at once instead of timing out in their next
    /// collective. The previous panic hook still runs (the message and backtrace print as
    /// usual). Holds the group weakly: once it is dropped, panics are reported as before.
    ///
    /// ```no_run
    /// let pg = std::sync::Arc::new(phalanx_pg::init_process_group()?);
    /// pg.abort_on_panic();
    /// # Ok::<(), phalanx_pg::Error>(())
    /// ```
    pub fn abort_on_panic(self: &Arc<Self>) {
        let pg = Arc::downgrade(self);
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some(pg) = pg.upgrade() {
                let msg = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".into());
                let at = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                pg.abort(&format!("rank {} failed: panic: {msg}{at}", pg.rank()));
            }
            previous(info);
        }));
    }

    pub(crate) fn check_rank(&self, r: usize, what: &str) -> Result<()> {
        if r < self.world_size() {
            Ok(())
        } else {
            Err(self.usage(format!(
                "{what} {r} is not below world_size {}",
                self.world_size()
            )))
        }
    }

    fn usage(&self, cause: String) -> Error {
        Error::Collective {
            rank: self.rank(),
            op: "argument check".into(),
            cause,
        }
    }

    pub(crate) fn blocking<R>(
        &self,
        name: &'static str,
        bytes: usize,
        f: impl FnOnce(&Shared, &mut Exec, u64) -> Step<R>,
    ) -> Result<R> {
        // Run behind anything queued to keep issue order (Note [Issue order]).
        self.pending.wait_idle();
        self.shared.run(name, bytes, f)
    }

    fn enqueue<T: Send + 'static>(
        &self,
        name: &'static str,
        bytes: usize,
        f: impl FnOnce(&Shared, &mut Exec, u64) -> Step<T> + Send + 'static,
    ) -> Work<T> {
        let (work, slot) = Work::new();
        self.submit(Box::new(move |s: &Shared| {
            slot.complete(s.run(name, bytes, f))
        }));
        work
    }

    fn submit(&self, job: Job) {
        self.pending.add();
        let mut q = self.queue.lock().unwrap();
        if q.is_none() {
            let (tx, rx) = mpsc::channel::<Job>();
            let (shared, pending) = (self.shared.clone(), self.pending.clone());
            let handle = thread::Builder::new()
                .name(format!("phalanx-pg-{}", self.rank()))
                .spawn(move || {
                    for job in rx {
                        job(&shared);
                        pending.done();
                    }
                })
                .expect("spawning the process group's worker thread");
            *q = Some(tx);
            *self.worker.lock().unwrap() = Some(handle);
        }
        q.as_ref()
            .unwrap()
            .send(job)
            .expect("worker thread alive while the group lives");
    }

    /// Whether this group runs collectives on GPU memory ([`allreduce_device`]
    /// (Self::allreduce_device)): the NCCL backend does, the native and MPI backends do not.
    #[cfg(feature = "nccl")]
    pub fn supports_device_buffers(&self) -> bool {
        matches!(self.shared.exec.lock().unwrap().links, Links::Nccl(_))
    }

    /// Reduces `buf` across ranks in place, on the GPU. `Avg` divides on the device
    /// (`ncclAvg`). Blocks until the result is in `buf`.
    ///
    /// # Safety
    /// `buf` describes memory of this rank's GPU holding `buf.len` elements of `buf.dtype`; the
    /// work that wrote it has completed, and nothing reads or writes it until this returns.
    #[cfg(feature = "nccl")]
    pub unsafe fn allreduce_device(&self, buf: DeviceSlice, op: ReduceOp) -> Result<()> {
        self.require_device_buffers("allreduce_device")?;
        // SAFETY: the caller's contract.
        self.blocking("allreduce", buf.bytes(), |_, t, _| unsafe {
            t.allreduce_device(buf, op).map(|algo| ((), algo))
        })
    }

    /// Copies `root`'s `buf` to every rank, on the GPU. Blocks until the result is in `buf`.
    ///
    /// # Safety
    /// As [`allreduce_device`](Self::allreduce_device).
    #[cfg(feature = "nccl")]
    pub unsafe fn broadcast_device(&self, buf: DeviceSlice, root: usize) -> Result<()> {
        self.require_device_buffers("broadcast_device")?;
        self.check_rank(root, "broadcast root")?;
        // SAFETY: the caller's contract.
        self.blocking("broadcast", buf.bytes(), |_, t, _| unsafe {
            t.broadcast_device(buf, root).map(|algo| ((), algo))
        })
    }

    #[cfg(feature = "nccl")]
    fn require_device_buffers(&self, op: &'static str) -> Result<()> {
        if self.supports_device_buffers() {
            return Ok(());
        }
        Err(Error::Backend {
            backend: "nccl",
            reason: format!(
                "{op} takes GPU memory, which only the nccl backend reduces in place, and this \
                 process group does not run on it (use the host-slice collectives, or \
                 --backend nccl)"
            ),
        })
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        drop(self.queue.lock().unwrap().take());
        if let Some(h) = self.worker.lock().unwrap().take() {
            let _ = h.join();
        }
        match trace::flush(self.rank()) {
            Ok(Some(path)) => {
                tracing::info!(rank = self.rank(), path = %path.display(), "phalanx: trace written")
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(rank = self.rank(), "phalanx: cannot write the trace: {e}"),
        }
    }
}
