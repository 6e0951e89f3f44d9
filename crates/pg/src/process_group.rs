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
    check::Caller,
    exec::{AnyBackend, Exec},
    flight_recorder::{self, Shape},
    native::Native,
    pending::Pending,
    progress::Progress,
    shared::{Shared, Step},
    work::Work,
    P2POp, Placement, Result,
};

type Job = Box<dyn FnOnce(&Shared) + Send>;

/// A group of ranks that run collectives together.
pub struct ProcessGroup {
    pub(crate) shared: Arc<Shared>,
    queue: Mutex<Option<mpsc::Sender<Job>>>,
    worker: Mutex<Option<thread::JoinHandle<()>>>,
    pending: Arc<Pending>,
    /// How to make subgroups of this group (native groups only).
    seed: Option<GroupSeed>,
    // Kept alive for the group's lifetime when this rank hosts the store.
    _server: Option<StoreServer>,
}

/// What a native group keeps to make subgroups of itself (`new_group`, `split_group`): how it
/// connected, each rank's host, and its ranks in the job's numbering.
#[derive(Debug)]
pub(crate) struct GroupSeed {
    pub(crate) auth: phalanx_store::Auth,
    pub(crate) ip: std::net::IpAddr,
    pub(crate) timeout: std::time::Duration,
    pub(crate) opts: Options,
    /// Host number of each rank of this group (ranks with equal numbers share memory; Note [A
    /// table read in place] in bootstrap/table.rs).
    pub(crate) hosts: Vec<u32>,
    pub(crate) node_rank: usize,
    /// Subgroups made so far; every rank makes them in the same order, so the count names
    /// each one's store prefix.
    pub(crate) made: std::sync::atomic::AtomicU64,
    /// This group's ranks in the job's numbering (`0..world_size` for the world).
    pub(crate) job_ranks: Vec<usize>,
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("rank", &self.shared.rank)
            .field("world_size", &self.shared.world_size)
            .finish_non_exhaustive()
    }
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
        let backend = AnyBackend::Native(Native::new(transport, shm));
        ProcessGroup::with_backend(placement, backend, abort, shm_abort, store, server, opts)
    }

    /// A group over any backend (Note [One backend] in exec.rs).
    pub(crate) fn with_backend(
        placement: Placement,
        backend: AnyBackend,
        abort: AbortHandle,
        shm_abort: Option<ShmAbortHandle>,
        store: Arc<dyn Store>,
        server: Option<StoreServer>,
        opts: Options,
    ) -> ProcessGroup {
        let exec = Exec::new(backend);
        ProcessGroup {
            shared: Arc::new(Shared {
                backend: exec.name(),
                sends_complete_alone: exec.sends_complete_alone(),
                label: std::sync::OnceLock::new(),
                fault_tolerant: std::sync::atomic::AtomicBool::new(false),
                rank: placement.rank,
                world_size: placement.world_size,
                local_rank: placement.local_rank,
                local_world_size: placement.local_world_size,
                shm_abort,
                exec: Mutex::new(exec),
                store,
                abort,
                failed: Mutex::new(None),
                progress: Progress::default(),
                opts,
                reported: Mutex::new(Vec::new()),
                fr: flight_recorder::register(
                    placement.rank,
                    placement.world_size,
                    phalanx_core::Timeout::from_env().unwrap_or(phalanx_core::DEFAULT_TIMEOUT),
                ),
            }),
            queue: Mutex::new(None),
            worker: Mutex::new(None),
            pending: Arc::new(Pending::default()),
            seed: None,
            _server: server,
        }
    }

    /// Lets this group make subgroups (a native group, as `connect` made it).
    pub(crate) fn set_seed(&mut self, seed: GroupSeed) {
        self.seed = Some(seed);
    }

    /// Makes this group a subgroup: its ranks are these ranks of the job, and its errors say
    /// so.
    pub(crate) fn set_job_ranks(&mut self, job_ranks: Vec<usize>) {
        flight_recorder::set_ranks(self.shared.fr, &job_ranks);
        let _ = self
            .shared
            .label
            .set(format!("subgroup of job ranks {job_ranks:?}"));
        if let Some(s) = self.seed.as_mut() {
            s.job_ranks = job_ranks;
        }
    }

    /// How to make subgroups of this group; `None` on the MPI and NCCL backends.
    pub(crate) fn seed(&self) -> Option<&GroupSeed> {
        self.seed.as_ref()
    }

    /// The job's rank of this group's rank `r` (the same for the world; a subgroup's ranks
    /// are numbered `0..len` in the order `new_group` was given them).
    pub fn job_rank(&self, r: usize) -> usize {
        self.seed
            .as_ref()
            .and_then(|s| s.job_ranks.get(r).copied())
            .unwrap_or(r)
    }

    /// The backend's name: `native`, `mpi` or `nccl`.
    pub fn backend(&self) -> &'static str {
        self.shared.backend
    }

    /// Whether a send here completes with no receive posted for it, whatever its size, once
    /// its peer waits in a point-to-point operation of the group (any, not only the matching
    /// receive): the native backend's sends do (Note [Sends that read] in phalanx-transport).
    /// MPI's and NCCL's large sends may wait for their receive, so a program of sends and
    /// receives that relies on this pairs each send with its receive there instead.
    ///
    /// ```
    /// let alone = phalanx_testing::spawn_ranks(2, |pg| pg.sends_complete_alone());
    /// assert_eq!(alone, vec![true, true]);
    /// ```
    pub fn sends_complete_alone(&self) -> bool {
        self.shared.sends_complete_alone
    }

    /// Reads the peers' point-to-point messages ahead on a thread of its own while no
    /// operation of this group runs, so that every send to this rank completes while it
    /// computes or waits in another group, as Gloo's and NCCL's do (Note [Background progress]
    /// in phalanx-transport). For a group of few, large messages, such as a pipeline's, whose
    /// stages compute with collectives of other groups: each message that arrives between
    /// operations costs a thread wake-up. Once started it runs until the group is dropped;
    /// MPI and NCCL move their own bytes and ignore it.
    ///
    /// ```
    /// let got = phalanx_testing::spawn_ranks(2, |pg| {
    ///     pg.start_progress().unwrap();
    ///     let mut x = [pg.rank() as f32];
    ///     pg.allreduce(&mut x, phalanx_core::ReduceOp::Sum).unwrap();
    ///     x[0]
    /// });
    /// assert_eq!(got, vec![1.0, 1.0]);
    /// ```
    pub fn start_progress(&self) -> Result<()> {
        self.pending.wait_idle();
        self.shared
            .exec
            .lock()
            .unwrap()
            .start_progress()
            .map_err(|source| crate::Error::Setup {
                rank: self.shared.rank,
                source,
            })
    }

    /// This rank, its group's size and backend: what the argument checks (`check.rs`) see.
    pub(crate) fn caller(&self) -> Caller {
        Caller {
            rank: self.shared.rank,
            world_size: self.shared.world_size,
            backend: self.shared.backend,
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
        self.caller().reduce_op::<T>("allreduce", op)?;
        let shape = Shape::of::<T>(buf.len(), buf.len());
        self.blocking("allreduce", shape, |s, t, seq| {
            Ok(((), t.allreduce(seq, buf, op, &s.opts)?))
        })
    }

    /// Starts an allreduce of `buf`; the reduced buffer comes back from [`Work::wait`].
    pub fn allreduce_async<T: Element>(&self, buf: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        self.allreduce_async_buffer::<T, _>(buf, op)
    }

    /// [`allreduce_async`](Self::allreduce_async) of any owned buffer, reduced in place: a
    /// tensor library's own storage travels without a copy into a `Vec` (DDP's gradient as
    /// bucket view). The buffer comes back from [`Work::wait`].
    pub fn allreduce_async_buffer<T: Element, B: AsMut<[T]> + Send + 'static>(
        &self,
        mut buf: B,
        op: ReduceOp,
    ) -> Work<B> {
        if let Err(e) = self.caller().reduce_op::<T>("allreduce", op) {
            return Work::ready(Err(e));
        }
        let shape = Shape::of::<T>(buf.as_mut().len(), buf.as_mut().len());
        self.enqueue("allreduce", shape, move |s, t, seq| {
            let algo = t.allreduce(seq, buf.as_mut(), op, &s.opts)?;
            Ok((buf, algo))
        })
    }

    /// Copies `root`'s `buf` to every rank.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        self.caller().rank(root, "broadcast root")?;
        let shape = Shape::of::<T>(buf.len(), buf.len());
        self.blocking("broadcast", shape, |s, t, seq| {
            Ok(((), t.broadcast(seq, buf, root, &s.opts)?))
        })
    }

    /// Gathers every rank's `send`; `recv.len()` must be `send.len() * world_size`.
    pub fn allgather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.caller().allgather(send.len(), recv.len())?;
        let shape = Shape::of::<T>(send.len(), recv.len());
        self.blocking("allgather", shape, |s, t, seq| {
            Ok(((), t.allgather(seq, send, recv, &s.opts)?))
        })
    }

    /// PyTorch's `ReduceOp.PREMUL_SUM` (NCCL's `ncclRedOpCreatePreMulSum`): every rank's
    /// `buf` multiplied by `factor`, then summed across ranks, in place. Float dtypes only;
    /// `factor` is rounded to `T` and each product to `T`, as a multiplication in `T` would.
    /// With `factor = 1 / world_size` it is an average that divides before summing.
    pub fn allreduce_premul_sum<T: Element>(&self, buf: &mut [T], factor: f64) -> Result<()> {
        self.premultiply("allreduce", buf, factor)?;
        self.allreduce(buf, ReduceOp::Sum)
    }

    /// [`reduce_scatter`](Self::reduce_scatter) with PREMUL_SUM (see
    /// [`allreduce_premul_sum`](Self::allreduce_premul_sum)); `send` is scaled in place.
    pub fn reduce_scatter_premul_sum<T: Element>(
        &self,
        send: &mut [T],
        recv: &mut [T],
        factor: f64,
    ) -> Result<()> {
        // Checked before `send` is touched: a refused call changes nothing.
        self.caller().reduce_scatter(send.len(), recv.len())?;
        self.premultiply("reduce_scatter", send, factor)?;
        self.reduce_scatter(send, recv, ReduceOp::Sum)
    }

    /// The scale of PREMUL_SUM, refused for integer dtypes and a factor that is not finite.
    fn premultiply<T: Element>(&self, what: &str, buf: &mut [T], factor: f64) -> Result<()> {
        self.caller().premul_sum::<T>(what, factor)?;
        // The product of two values of a float type narrower than f64 is exact in f64, so
        // rounding it once to `T` gives `T`'s own product, bit for bit.
        let f = T::from_f64(factor).to_f64();
        for x in buf.iter_mut() {
            *x = T::from_f64(x.to_f64() * f);
        }
        Ok(())
    }

    /// Reduces `send` (world_size blocks of `recv.len()`) and leaves block `rank` in `recv`.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &mut [T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let c = self.caller();
        c.reduce_op::<T>("reduce_scatter", op)?;
        c.reduce_scatter(send.len(), recv.len())?;
        let shape = Shape::of::<T>(send.len(), recv.len());
        self.blocking("reduce_scatter", shape, |s, t, seq| {
            Ok(((), t.reduce_scatter(seq, send, recv, op, &s.opts)?))
        })
    }

    /// Returns when every rank has called it.
    pub fn barrier(&self) -> Result<()> {
        self.blocking("barrier", Shape::none(), |_, t, seq| {
            Ok(((), t.barrier(seq)?))
        })
    }

    /// Starts a broadcast of `root`'s `buf`; every rank's buffer comes back from
    /// [`Work::wait`] holding the root's values.
    pub fn broadcast_async<T: Element>(&self, mut buf: Vec<T>, root: usize) -> Work<Vec<T>> {
        if let Err(e) = self.caller().rank(root, "broadcast root") {
            return Work::ready(Err(e));
        }
        let shape = Shape::of::<T>(buf.len(), buf.len());
        self.enqueue("broadcast", shape, move |s, t, seq| {
            let algo = t.broadcast(seq, &mut buf, root, &s.opts)?;
            Ok((buf, algo))
        })
    }

    /// Starts an allgather of every rank's `send`; the `world_size × send.len()` result
    /// comes back from [`Work::wait`].
    pub fn allgather_async<T: Element>(&self, send: Vec<T>) -> Work<Vec<T>> {
        let mut recv = vec![T::zeroed(); send.len() * self.world_size()];
        let shape = Shape::of::<T>(send.len(), recv.len());
        self.enqueue("allgather", shape, move |s, t, seq| {
            let algo = t.allgather(seq, &send, &mut recv, &s.opts)?;
            Ok((recv, algo))
        })
    }

    /// Starts a reduce_scatter of `send` (`world_size` equal blocks); this rank's reduced
    /// block comes back from [`Work::wait`].
    pub fn reduce_scatter_async<T: Element>(&self, mut send: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        let c = self.caller();
        if let Err(e) = c.reduce_op::<T>("reduce_scatter", op) {
            return Work::ready(Err(e));
        }
        if let Err(e) = c.equal_blocks("reduce_scatter", send.len()) {
            return Work::ready(Err(e));
        }
        let mut recv = vec![T::zeroed(); send.len() / self.world_size()];
        let shape = Shape::of::<T>(send.len(), recv.len());
        self.enqueue("reduce_scatter", shape, move |s, t, seq| {
            let algo = t.reduce_scatter(seq, &mut send, &mut recv, op, &s.opts)?;
            Ok((recv, algo))
        })
    }

    /// Starts a barrier; [`Work::wait`] returns once every rank has entered it.
    pub fn barrier_async(&self) -> Work<()> {
        self.enqueue("barrier", Shape::none(), |_, t, seq| {
            Ok(((), t.barrier(seq)?))
        })
    }

    /// Reduces `buf` across ranks into `root`'s `buf` (bitwise the allreduce's result there);
    /// other ranks' buffers are left unspecified, as in PyTorch. Native backend only.
    pub fn reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp, root: usize) -> Result<()> {
        let c = self.caller();
        c.native_only("reduce")?;
        c.reduce_op::<T>("reduce", op)?;
        c.rank(root, "reduce root")?;
        let shape = Shape::of::<T>(buf.len(), buf.len());
        self.blocking("reduce", shape, |s, t, seq| {
            Ok(((), t.reduce(seq, buf, op, root, &s.opts)?))
        })
    }

    /// Starts a [`reduce`](Self::reduce); the buffer comes back from [`Work::wait`].
    pub fn reduce_async<T: Element>(
        &self,
        mut buf: Vec<T>,
        op: ReduceOp,
        root: usize,
    ) -> Work<Vec<T>> {
        let c = self.caller();
        if let Err(e) = c
            .native_only("reduce")
            .and_then(|()| c.reduce_op::<T>("reduce", op))
            .and_then(|()| c.rank(root, "reduce root"))
        {
            return Work::ready(Err(e));
        }
        let shape = Shape::of::<T>(buf.len(), buf.len());
        self.enqueue("reduce", shape, move |s, t, seq| {
            let algo = t.reduce(seq, &mut buf, op, root, &s.opts)?;
            Ok((buf, algo))
        })
    }

    /// Gathers every rank's `send` into `root`'s `recv` (rank `p`'s block at
    /// `p × send.len()`). `recv` must hold `world_size × send.len()` elements on the root and
    /// is not touched elsewhere (pass `&mut []`). Native backend only.
    pub fn gather<T: Element>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        let c = self.caller();
        c.native_only("gather")?;
        c.rank(root, "gather root")?;
        c.gather(root, send.len(), recv.len())?;
        let shape = Shape::of::<T>(send.len(), recv.len());
        self.blocking("gather", shape, |_, t, seq| {
            Ok(((), t.gather(seq, send, recv, root)?))
        })
    }

    /// Hands block `p` of `root`'s `send` (`world_size` blocks of `recv.len()`) to rank `p`'s
    /// `recv`. `send` is only read on the root (pass `&[]` elsewhere). Native backend only.
    pub fn scatter<T: Element>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        let c = self.caller();
        c.native_only("scatter")?;
        c.rank(root, "scatter root")?;
        c.scatter(root, send.len(), recv.len())?;
        let shape = Shape::of::<T>(send.len(), recv.len());
        self.blocking("scatter", shape, |_, t, seq| {
            Ok(((), t.scatter(seq, send, recv, root)?))
        })
    }

    /// Sends block `p` of `send` to rank `p` and receives rank `p`'s block for this rank into
    /// block `p` of `recv`: `world_size` equal blocks each. Native backend only.
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.caller().all_to_all(send.len(), recv.len())?;
        let n = self.world_size();
        let counts = vec![send.len() / n; n];
        self.all_to_all_splits(send, &counts, recv, &counts, true)
    }

    /// PyTorch's `all_to_all_single` with split sizes: `send_splits[p]` elements of `send`
    /// (packed in rank order) go to rank `p`, and `recv_splits[p]` elements from rank `p` land
    /// in `recv` (packed likewise). `send_splits[p]` here must equal `recv_splits[rank]` on
    /// rank `p`; a mismatch fails on the receiver, naming both lengths. Native backend only.
    pub fn all_to_all_single<T: Element>(
        &self,
        send: &[T],
        send_splits: &[usize],
        recv: &mut [T],
        recv_splits: &[usize],
    ) -> Result<()> {
        self.all_to_all_splits(send, send_splits, recv, recv_splits, false)
    }

    fn all_to_all_splits<T: Element>(
        &self,
        send: &[T],
        send_splits: &[usize],
        recv: &mut [T],
        recv_splits: &[usize],
        equal: bool,
    ) -> Result<()> {
        let c = self.caller();
        c.native_only("all_to_all")?;
        c.splits("all_to_all", "send", send.len(), send_splits)?;
        c.splits("all_to_all", "recv", recv.len(), recv_splits)?;
        c.own_block(send_splits, recv_splits)?;
        let shape = Shape::of::<T>(send.len(), recv.len());
        self.blocking("all_to_all", shape, |_, t, seq| {
            Ok((
                (),
                t.all_to_all(seq, send, send_splits, recv, recv_splits, equal)?,
            ))
        })
    }

    /// Starts an [`all_to_all`](Self::all_to_all) of `send`; the received blocks come back
    /// from [`Work::wait`].
    pub fn all_to_all_async<T: Element>(&self, send: Vec<T>) -> Work<Vec<T>> {
        let c = self.caller();
        let n = self.world_size();
        if let Err(e) = c
            .native_only("all_to_all")
            .and_then(|()| c.equal_blocks("all_to_all", send.len()))
        {
            return Work::ready(Err(e));
        }
        let counts = vec![send.len() / n; n];
        let mut recv = vec![T::zeroed(); send.len()];
        let shape = Shape::of::<T>(send.len(), recv.len());
        self.enqueue("all_to_all", shape, move |_, t, seq| {
            let algo = t.all_to_all(seq, &send, &counts, &mut recv, &counts, true)?;
            Ok((recv, algo))
        })
    }

    /// Gathers blocks of different sizes: rank `p` contributes `counts[p]` elements, placed
    /// at `counts[..p].sum()` in every rank's `recv` (MPI's Allgatherv; PyTorch's
    /// `all_gather` with tensors of different sizes). Every rank passes the same `counts`.
    /// Native backend only.
    pub fn allgather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
    ) -> Result<()> {
        let c = self.caller();
        c.native_only("allgather_v")?;
        c.splits("allgather_v", "recv", recv.len(), counts)?;
        c.own_count("allgather_v", "send", send.len(), counts)?;
        let shape = Shape::of::<T>(recv.len(), recv.len());
        self.blocking("allgather_v", shape, |s, t, seq| {
            Ok(((), t.allgather_v(seq, send, recv, counts, &s.opts)?))
        })
    }

    /// Starts an [`allgather_v`](Self::allgather_v); the gathered blocks (`counts.sum()`
    /// elements) come back from [`Work::wait`].
    pub fn allgather_v_async<T: Element>(&self, send: Vec<T>, counts: Vec<usize>) -> Work<Vec<T>> {
        let c = self.caller();
        let total: usize = counts.iter().sum();
        if let Err(e) = c
            .native_only("allgather_v")
            .and_then(|()| c.splits("allgather_v", "recv", total, &counts))
            .and_then(|()| c.own_count("allgather_v", "send", send.len(), &counts))
        {
            return Work::ready(Err(e));
        }
        let mut recv = vec![T::zeroed(); total];
        let shape = Shape::of::<T>(recv.len(), recv.len());
        self.enqueue("allgather_v", shape, move |s, t, seq| {
            let algo = t.allgather_v(seq, &send, &mut recv, &counts, &s.opts)?;
            Ok((recv, algo))
        })
    }

    /// [`reduce_scatter_v_async`](Self::reduce_scatter_v_async) of any owned buffer, in place:
    /// the buffer comes back from [`Work::wait`] with this rank's block reduced and the other
    /// blocks unspecified (a tensor library's own storage travels without a copy, as in
    /// [`allreduce_async_buffer`](Self::allreduce_async_buffer)).
    pub fn reduce_scatter_v_async_buffer<T: Element, B: AsMut<[T]> + Send + 'static>(
        &self,
        mut buf: B,
        counts: Vec<usize>,
        op: ReduceOp,
    ) -> Work<B> {
        let c = self.caller();
        let len = buf.as_mut().len();
        if let Err(e) = c
            .native_only("reduce_scatter_v")
            .and_then(|()| c.reduce_op::<T>("reduce_scatter_v", op))
            .and_then(|()| c.splits("reduce_scatter_v", "send", len, &counts))
        {
            return Work::ready(Err(e));
        }
        let shape = Shape::of::<T>(len, len);
        self.enqueue("reduce_scatter_v", shape, move |s, t, seq| {
            let algo = t.reduce_scatter_v_in_place(seq, buf.as_mut(), &counts, op, &s.opts)?;
            Ok((buf, algo))
        })
    }

    /// reduce_scatter of blocks of different sizes (MPI's Reduce_scatter): block `p` of `send`
    /// holds `counts[p]` elements starting at `counts[..p].sum()`, and rank `p` receives the
    /// reduction of every rank's block `p` in `recv` (`counts[rank]` elements). Every rank
    /// passes the same `counts`. Block `p` is folded in the canonical order of a segment owned
    /// by `p` (Note [Canonical reduction order]), so an allreduce of a buffer whose segments
    /// are these blocks gives bitwise the same values. Native backend only.
    pub fn reduce_scatter_v<T: Element>(
        &self,
        send: &mut [T],
        recv: &mut [T],
        counts: &[usize],
        op: ReduceOp,
    ) -> Result<()> {
        let c = self.caller();
        c.native_only("reduce_scatter_v")?;
        c.reduce_op::<T>("reduce_scatter_v", op)?;
        c.splits("reduce_scatter_v", "send", send.len(), counts)?;
        c.own_count("reduce_scatter_v", "recv", recv.len(), counts)?;
        let shape = Shape::of::<T>(send.len(), send.len());
        self.blocking("reduce_scatter_v", shape, |s, t, seq| {
            Ok((
                (),
                t.reduce_scatter_v(seq, send, recv, counts, op, &s.opts)?,
            ))
        })
    }

    /// Starts a [`reduce_scatter_v`](Self::reduce_scatter_v); this rank's reduced block
    /// (`counts[rank]` elements) comes back from [`Work::wait`].
    pub fn reduce_scatter_v_async<T: Element>(
        &self,
        mut send: Vec<T>,
        counts: Vec<usize>,
        op: ReduceOp,
    ) -> Work<Vec<T>> {
        let c = self.caller();
        if let Err(e) = c
            .native_only("reduce_scatter_v")
            .and_then(|()| c.reduce_op::<T>("reduce_scatter_v", op))
            .and_then(|()| c.splits("reduce_scatter_v", "send", send.len(), &counts))
        {
            return Work::ready(Err(e));
        }
        let mut recv = vec![T::zeroed(); counts[self.rank()]];
        let shape = Shape::of::<T>(send.len(), send.len());
        self.enqueue("reduce_scatter_v", shape, move |s, t, seq| {
            let algo = t.reduce_scatter_v(seq, &mut send, &mut recv, &counts, op, &s.opts)?;
            Ok((recv, algo))
        })
    }

    /// Sends `buf` to `peer`, blocking until it is on its way; matched by the `recv` of the
    /// same `tag`, element type and count there. Each pair of ranks numbers its messages
    /// itself, so send/recv among some ranks interleave freely with collectives of all; only
    /// the messages of one pair must be received in the order they were sent.
    pub fn send<T: Element>(&self, buf: &[T], peer: usize, tag: u32) -> Result<()> {
        self.caller().peer(peer, "send")?;
        let shape = Shape::p2p::<T>(buf.len(), peer);
        self.pending.wait_idle();
        self.shared
            .run_p2p("send", shape, |t| Ok(((), t.send(buf, peer, tag)?)))
    }

    /// Receives into `buf` from `peer` the message [`send`](Self::send) sent with `tag`.
    pub fn recv<T: Element>(&self, buf: &mut [T], peer: usize, tag: u32) -> Result<()> {
        self.caller().peer(peer, "recv")?;
        let shape = Shape::p2p::<T>(buf.len(), peer);
        self.pending.wait_idle();
        self.shared
            .run_p2p("recv", shape, |t| Ok(((), t.recv(buf, peer, tag)?)))
    }

    /// Starts sending `buf` to `peer`; the buffer comes back from [`Work::wait`]. Runs in issue
    /// order with the group's other asynchronous operations; two ranks that send each other
    /// large messages should use [`batch_isend_irecv`](Self::batch_isend_irecv), which moves
    /// both directions at once.
    pub fn isend<T: Element>(&self, buf: Vec<T>, peer: usize, tag: u32) -> Work<Vec<T>> {
        if let Err(e) = self.caller().peer(peer, "isend") {
            return Work::ready(Err(e));
        }
        let shape = Shape::p2p::<T>(buf.len(), peer);
        self.enqueue_p2p("isend", shape, move |t| {
            let algo = t.send(&buf, peer, tag)?;
            Ok((buf, algo))
        })
    }

    /// Starts receiving into `buf` from `peer`; the filled buffer comes back from
    /// [`Work::wait`].
    pub fn irecv<T: Element>(&self, mut buf: Vec<T>, peer: usize, tag: u32) -> Work<Vec<T>> {
        if let Err(e) = self.caller().peer(peer, "irecv") {
            return Work::ready(Err(e));
        }
        let shape = Shape::p2p::<T>(buf.len(), peer);
        self.enqueue_p2p("irecv", shape, move |t| {
            let algo = t.recv(&mut buf, peer, tag)?;
            Ok((buf, algo))
        })
    }

    /// Starts every send and receive of `ops` at once (PyTorch's `batch_isend_irecv`, the
    /// building block of pipeline parallelism): all directions move concurrently, so two ranks
    /// exchanging large messages never wait on each other. The operations come back from
    /// [`Work::wait`], each `Recv` holding what arrived. The MPI backend refuses it (its
    /// point-to-point runs one blocking call at a time).
    ///
    /// ```
    /// use phalanx_pg::P2POp;
    /// let got = phalanx_testing::spawn_ranks(2, |pg| {
    ///     let other = 1 - pg.rank();
    ///     let ops = vec![
    ///         P2POp::Send { buf: vec![pg.rank() as f32; 3], peer: other, tag: 0 },
    ///         P2POp::Recv { buf: vec![0f32; 3], peer: other, tag: 0 },
    ///     ];
    ///     let done = pg.batch_isend_irecv(ops).wait().unwrap();
    ///     done[1].buf()[0]
    /// });
    /// assert_eq!(got, vec![1.0, 0.0]);
    /// ```
    pub fn batch_isend_irecv<T: Element>(&self, mut ops: Vec<P2POp<T>>) -> Work<Vec<P2POp<T>>> {
        let shape = match self.batch_shape(&ops) {
            Ok(shape) => shape,
            Err(e) => return Work::ready(Err(e)),
        };
        self.enqueue_p2p("batch_isend_irecv", shape, move |t| {
            let algo = t.send_recv_batch(&mut ops)?;
            Ok((ops, algo))
        })
    }

    /// [`batch_isend_irecv`](Self::batch_isend_irecv) run on the calling thread and waited
    /// for: a caller that would wait at once saves the hand-off to the group's worker thread
    /// and back, two wake-ups (a pipeline stage's exchanges, where each is ~50 µs of a 3 ms
    /// microbatch). Runs after the group's asynchronous operations already issued.
    pub fn batch_send_recv<T: Element>(&self, mut ops: Vec<P2POp<T>>) -> Result<Vec<P2POp<T>>> {
        let shape = self.batch_shape(&ops)?;
        self.pending.wait_idle();
        self.shared.run_p2p("batch_isend_irecv", shape, |t| {
            let algo = t.send_recv_batch(&mut ops)?;
            Ok(((), algo))
        })?;
        Ok(ops)
    }

    /// A batch's operations checked, and the shape the flight recorder gives it.
    fn batch_shape<T: Element>(&self, ops: &[P2POp<T>]) -> Result<Shape> {
        let c = self.caller();
        for op in ops {
            c.peer(op.peer(), "batch_isend_irecv")?;
        }
        c.batch()?;
        let n = ops.iter().map(|op| op.buf().len()).sum();
        Ok(Shape::of::<T>(n, n))
    }

    /// Why this group failed (its first failure's root cause, here or on another rank), or
    /// `None` while it works: after a failure every collective returns an error.
    pub fn failure(&self) -> Option<String> {
        self.shared.failed.lock().unwrap().clone()
    }

    /// Makes this group a fault-tolerant generation (its subgroups are too): its failures
    /// wait neither for a dead peer's word nor long for the store (Note [FT generations]).
    pub(crate) fn set_fault_tolerant(&self) {
        self.shared
            .fault_tolerant
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether this group is a fault-tolerant generation or a subgroup of one.
    pub(crate) fn is_fault_tolerant(&self) -> bool {
        self.shared.is_fault_tolerant()
    }

    /// How long this group's waits on the network spin before they sleep (50 µs by default,
    /// so that a rank whose work overlaps a collective never burns the core its compute
    /// needs). A caller that only ever waits on this group with nothing else to do, on a core
    /// of its own, may spin up to a whole compute: a pipeline stage does (Note [Spin then
    /// poll] in phalanx-transport). Applies to the operations issued after it.
    ///
    /// ```
    /// let ok = phalanx_testing::spawn_ranks(2, |pg| {
    ///     pg.set_wait_spin(std::time::Duration::from_millis(2));
    ///     let mut x = [pg.rank() as f32];
    ///     pg.allreduce(&mut x, phalanx_core::ReduceOp::Sum).is_ok()
    /// });
    /// assert_eq!(ok, vec![true, true]);
    /// ```
    pub fn set_wait_spin(&self, spin: std::time::Duration) {
        // Behind the operations already issued, as they hold the backend until done.
        self.pending.wait_idle();
        self.shared.exec.lock().unwrap().set_wait_spin(spin);
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

    pub(crate) fn blocking<R>(
        &self,
        name: &'static str,
        shape: Shape,
        f: impl FnOnce(&Shared, &mut Exec, u64) -> Step<R>,
    ) -> Result<R> {
        // Run behind anything queued to keep issue order (Note [Issue order]).
        self.pending.wait_idle();
        self.shared.run(name, shape, f)
    }

    fn enqueue<T: Send + 'static>(
        &self,
        name: &'static str,
        shape: Shape,
        f: impl FnOnce(&Shared, &mut Exec, u64) -> Step<T> + Send + 'static,
    ) -> Work<T> {
        let (work, slot) = Work::new();
        self.submit(Box::new(move |s: &Shared| {
            slot.complete(s.run(name, shape, f))
        }));
        work
    }

    fn enqueue_p2p<T: Send + 'static>(
        &self,
        name: &'static str,
        shape: Shape,
        f: impl FnOnce(&mut Exec) -> Step<T> + Send + 'static,
    ) -> Work<T> {
        let (work, slot) = Work::new();
        self.submit(Box::new(move |s: &Shared| {
            slot.complete(s.run_p2p(name, shape, f))
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
        self.caller().supports_device_buffers()
    }

    /// Reduces `buf` across ranks in place, on the GPU. `Avg` divides on the device
    /// (`ncclAvg`). Blocks until the result is in `buf`.
    ///
    /// # Safety
    /// `buf` describes memory of this rank's GPU holding `buf.len` elements of `buf.dtype`; the
    /// work that wrote it has completed, and nothing reads or writes it until this returns.
    #[cfg(feature = "nccl")]
    pub unsafe fn allreduce_device(&self, buf: DeviceSlice, op: ReduceOp) -> Result<()> {
        let c = self.caller();
        c.device_buffers("allreduce_device")?;
        c.device_reduce_op(op)?;
        // SAFETY: the caller's contract.
        self.blocking("allreduce", buf.shape(), |_, t, _| unsafe {
            t.allreduce_device(buf, op).map(|algo| ((), algo))
        })
    }

    /// Copies `root`'s `buf` to every rank, on the GPU. Blocks until the result is in `buf`.
    ///
    /// # Safety
    /// As [`allreduce_device`](Self::allreduce_device).
    #[cfg(feature = "nccl")]
    pub unsafe fn broadcast_device(&self, buf: DeviceSlice, root: usize) -> Result<()> {
        let c = self.caller();
        c.device_buffers("broadcast_device")?;
        c.rank(root, "broadcast root")?;
        // SAFETY: the caller's contract.
        self.blocking("broadcast", buf.shape(), |_, t, _| unsafe {
            t.broadcast_device(buf, root).map(|algo| ((), algo))
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
