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
use phalanx_core::{trace, DType, Element, ReduceOp};
use phalanx_store::{Store, StoreServer};
use phalanx_transport::{
    shm::{ShmAbortHandle, ShmGroup},
    AbortHandle, Transport,
};

#[cfg(feature = "nccl")]
use crate::DeviceSlice;
use crate::{
    exec::{Exec, Links},
    flight_recorder::{self, Shape},
    pending::Pending,
    progress::Progress,
    shared::{Shared, Step},
    work::Work,
    Error, P2POp, Placement, Result,
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
    /// Host key of each rank of this group (ranks with equal keys share memory).
    pub(crate) hosts: Vec<String>,
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
        let backend = links.backend();
        ProcessGroup {
            shared: Arc::new(Shared {
                backend,
                label: std::sync::OnceLock::new(),
                peer_word_wait: Mutex::new(std::time::Duration::from_millis(500)),
                #[cfg(feature = "mpi")]
                mpi,
                rank: placement.rank,
                world_size: placement.world_size,
                local_rank: placement.local_rank,
                local_world_size: placement.local_world_size,
                shm_abort,
                exec: Mutex::new(Exec::new(links, placement.world_size)),
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
        self.check_op::<T>("allreduce", op)?;
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
        if let Err(e) = self.check_op::<T>("allreduce", op) {
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
        self.check_rank(root, "broadcast root")?;
        let shape = Shape::of::<T>(buf.len(), buf.len());
        self.blocking("broadcast", shape, |s, t, seq| {
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
        self.check_reduce_scatter(send, recv)?;
        self.premultiply("reduce_scatter", send, factor)?;
        self.reduce_scatter(send, recv, ReduceOp::Sum)
    }

    /// The scale of PREMUL_SUM, refused for integer dtypes and a factor that is not finite.
    fn premultiply<T: Element>(&self, what: &str, buf: &mut [T], factor: f64) -> Result<()> {
        if !matches!(T::DTYPE, DType::F32 | DType::F64 | DType::BF16 | DType::F16) {
            return Err(self.usage(format!(
                "{what} with PREMUL_SUM: a scale before the sum, defined on float dtypes (f32, \
                 f64, bf16, f16), not {}",
                T::DTYPE
            )));
        }
        if !factor.is_finite() {
            return Err(self.usage(format!(
                "{what} with PREMUL_SUM: the factor {factor} is not a finite number"
            )));
        }
        // The product of two values of a float type narrower than f64 is exact in f64, so
        // rounding it once to `T` gives `T`'s own product, bit for bit.
        let f = T::from_f64(factor).to_f64();
        for x in buf.iter_mut() {
            *x = T::from_f64(x.to_f64() * f);
        }
        Ok(())
    }

    fn check_reduce_scatter<T: Element>(&self, send: &[T], recv: &[T]) -> Result<()> {
        if send.len() != recv.len() * self.world_size() {
            return Err(self.usage(format!(
                "reduce_scatter: send holds {} elements, expected recv.len() × world_size = {}",
                send.len(),
                recv.len() * self.world_size()
            )));
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
        self.check_op::<T>("reduce_scatter", op)?;
        self.check_reduce_scatter(send, recv)?;
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
        if let Err(e) = self.check_rank(root, "broadcast root") {
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
        if let Err(e) = self.check_op::<T>("reduce_scatter", op) {
            return Work::ready(Err(e));
        }
        let n = self.world_size();
        if !send.len().is_multiple_of(n) {
            return Work::ready(Err(self.usage(format!(
                "reduce_scatter: send holds {} elements, not a multiple of world_size {n}",
                send.len()
            ))));
        }
        let mut recv = vec![T::zeroed(); send.len() / n];
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
        self.require_native("reduce")?;
        self.check_op::<T>("reduce", op)?;
        self.check_rank(root, "reduce root")?;
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
        if let Err(e) = self
            .require_native("reduce")
            .and_then(|()| self.check_op::<T>("reduce", op))
            .and_then(|()| self.check_rank(root, "reduce root"))
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
        self.require_native("gather")?;
        self.check_rank(root, "gather root")?;
        if self.rank() == root && recv.len() != send.len() * self.world_size() {
            return Err(self.usage(format!(
                "gather: the root's recv holds {} elements, expected send.len() × world_size = {}",
                recv.len(),
                send.len() * self.world_size()
            )));
        }
        let shape = Shape::of::<T>(send.len(), recv.len());
        self.blocking("gather", shape, |_, t, seq| {
            Ok(((), t.gather(seq, send, recv, root)?))
        })
    }

    /// Hands block `p` of `root`'s `send` (`world_size` blocks of `recv.len()`) to rank `p`'s
    /// `recv`. `send` is only read on the root (pass `&[]` elsewhere). Native backend only.
    pub fn scatter<T: Element>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        self.require_native("scatter")?;
        self.check_rank(root, "scatter root")?;
        if self.rank() == root && send.len() != recv.len() * self.world_size() {
            return Err(self.usage(format!(
                "scatter: the root's send holds {} elements, expected recv.len() × world_size = {}",
                send.len(),
                recv.len() * self.world_size()
            )));
        }
        let shape = Shape::of::<T>(send.len(), recv.len());
        self.blocking("scatter", shape, |_, t, seq| {
            Ok(((), t.scatter(seq, send, recv, root)?))
        })
    }

    /// Sends block `p` of `send` to rank `p` and receives rank `p`'s block for this rank into
    /// block `p` of `recv`: `world_size` equal blocks each. Native backend only.
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let n = self.world_size();
        if send.len() != recv.len() || !send.len().is_multiple_of(n) {
            return Err(self.usage(format!(
                "all_to_all: send and recv must hold the same multiple of world_size {n} \
                 elements (they hold {} and {})",
                send.len(),
                recv.len()
            )));
        }
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
        self.require_native("all_to_all")?;
        self.check_splits("all_to_all", "send", send.len(), send_splits)?;
        self.check_splits("all_to_all", "recv", recv.len(), recv_splits)?;
        let r = self.rank();
        if send_splits[r] != recv_splits[r] {
            return Err(self.usage(format!(
                "all_to_all: this rank's block to itself is {} elements in send_splits but {} \
                 in recv_splits",
                send_splits[r], recv_splits[r]
            )));
        }
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
        let n = self.world_size();
        if let Err(e) = self.require_native("all_to_all") {
            return Work::ready(Err(e));
        }
        if !send.len().is_multiple_of(n) {
            return Work::ready(Err(self.usage(format!(
                "all_to_all: send holds {} elements, not a multiple of world_size {n}",
                send.len()
            ))));
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
        self.require_native("allgather_v")?;
        self.check_splits("allgather_v", "recv", recv.len(), counts)?;
        self.check_own_count("allgather_v", "send", send.len(), counts)?;
        let shape = Shape::of::<T>(recv.len(), recv.len());
        self.blocking("allgather_v", shape, |s, t, seq| {
            Ok(((), t.allgather_v(seq, send, recv, counts, &s.opts)?))
        })
    }

    /// This rank's own block must hold `counts[rank]` elements (after `check_splits`).
    fn check_own_count(&self, op: &str, what: &str, len: usize, counts: &[usize]) -> Result<()> {
        let r = self.rank();
        if len != counts[r] {
            return Err(self.usage(format!(
                "{op}: {what} holds {len} elements but counts[{r}] is {}",
                counts[r]
            )));
        }
        Ok(())
    }

    /// Starts an [`allgather_v`](Self::allgather_v); the gathered blocks (`counts.sum()`
    /// elements) come back from [`Work::wait`].
    pub fn allgather_v_async<T: Element>(&self, send: Vec<T>, counts: Vec<usize>) -> Work<Vec<T>> {
        let total: usize = counts.iter().sum();
        if let Err(e) = self
            .require_native("allgather_v")
            .and_then(|()| self.check_splits("allgather_v", "recv", total, &counts))
            .and_then(|()| self.check_own_count("allgather_v", "send", send.len(), &counts))
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
        let len = buf.as_mut().len();
        if let Err(e) = self
            .require_native("reduce_scatter_v")
            .and_then(|()| self.check_op::<T>("reduce_scatter_v", op))
            .and_then(|()| self.check_splits("reduce_scatter_v", "send", len, &counts))
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
        self.require_native("reduce_scatter_v")?;
        self.check_op::<T>("reduce_scatter_v", op)?;
        self.check_splits("reduce_scatter_v", "send", send.len(), counts)?;
        self.check_own_count("reduce_scatter_v", "recv", recv.len(), counts)?;
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
        if let Err(e) = self
            .require_native("reduce_scatter_v")
            .and_then(|()| self.check_op::<T>("reduce_scatter_v", op))
            .and_then(|()| self.check_splits("reduce_scatter_v", "send", send.len(), &counts))
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

    /// PyTorch's `all_gather_object`: every rank's bytes (its object, serialised as the
    /// caller likes), in rank order, on every rank. Native backend only.
    pub fn all_gather_object(&self, obj: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut lens = vec![0i64; self.world_size()];
        self.allgather(&[obj.len() as i64], &mut lens)?;
        let counts: Vec<usize> = lens.iter().map(|&l| l as usize).collect();
        let mut all = vec![0u8; counts.iter().sum()];
        self.allgather_v(obj, &mut all, &counts)?;
        let mut out = Vec::with_capacity(counts.len());
        let mut rest = &all[..];
        for c in counts {
            let (o, tail) = rest.split_at(c);
            out.push(o.to_vec());
            rest = tail;
        }
        Ok(out)
    }

    /// PyTorch's `broadcast_object_list` for one object: `root`'s bytes on every rank
    /// (`obj` is only read on the root).
    pub fn broadcast_object(&self, obj: &[u8], root: usize) -> Result<Vec<u8>> {
        self.check_rank(root, "broadcast_object root")?;
        let mut len = [obj.len() as i64];
        self.broadcast(&mut len, root)?;
        let mut buf = if self.rank() == root {
            obj.to_vec()
        } else {
            vec![0u8; len[0] as usize]
        };
        self.broadcast(&mut buf, root)?;
        Ok(buf)
    }

    /// PyTorch's `gather_object`: every rank's bytes, in rank order, on `root` (`None`
    /// elsewhere). Native backend only.
    pub fn gather_object(&self, obj: &[u8], root: usize) -> Result<Option<Vec<Vec<u8>>>> {
        self.check_rank(root, "gather_object root")?;
        let all = self.all_gather_object(obj)?;
        Ok((self.rank() == root).then_some(all))
    }

    /// PyTorch's `scatter_object_list`: object `p` of `root`'s `objs` (one per rank; only
    /// read on the root) to rank `p`. Native backend only.
    pub fn scatter_object_list(&self, objs: &[Vec<u8>], root: usize) -> Result<Vec<u8>> {
        self.check_rank(root, "scatter_object_list root")?;
        let n = self.world_size();
        let is_root = self.rank() == root;
        if is_root && objs.len() != n {
            return Err(self.usage(format!(
                "scatter_object_list: the root has {} objects for world_size {n}",
                objs.len()
            )));
        }
        let lens: Vec<i64> = if is_root {
            objs.iter().map(|o| o.len() as i64).collect()
        } else {
            Vec::new()
        };
        let mut len = [0i64];
        self.scatter(&lens, &mut len, root)?;
        if is_root {
            let ops = (0..n)
                .filter(|&p| p != root)
                .map(|p| P2POp::Send {
                    buf: objs[p].clone(),
                    peer: p,
                    tag: 0,
                })
                .collect();
            self.batch_isend_irecv(ops).wait()?;
            Ok(objs[root].clone())
        } else {
            let mut buf = vec![0u8; len[0] as usize];
            self.recv(&mut buf, root, 0)?;
            Ok(buf)
        }
    }

    /// Sends `buf` to `peer`, blocking until it is on its way; matched by the `recv` of the
    /// same `tag`, element type and count there. Each pair of ranks numbers its messages
    /// itself, so send/recv among some ranks interleave freely with collectives of all; only
    /// the messages of one pair must be received in the order they were sent.
    pub fn send<T: Element>(&self, buf: &[T], peer: usize, tag: u32) -> Result<()> {
        self.check_peer(peer, "send")?;
        let shape = Shape::p2p::<T>(buf.len(), peer);
        self.pending.wait_idle();
        self.shared
            .run_p2p("send", shape, |t| Ok(((), t.send(buf, peer, tag)?)))
    }

    /// Receives into `buf` from `peer` the message [`send`](Self::send) sent with `tag`.
    pub fn recv<T: Element>(&self, buf: &mut [T], peer: usize, tag: u32) -> Result<()> {
        self.check_peer(peer, "recv")?;
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
        if let Err(e) = self.check_peer(peer, "isend") {
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
        if let Err(e) = self.check_peer(peer, "irecv") {
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
        for op in &ops {
            if let Err(e) = self.check_peer(op.peer(), "batch_isend_irecv") {
                return Work::ready(Err(e));
            }
        }
        #[cfg(feature = "mpi")]
        if self.shared.mpi {
            return Work::ready(Err(Error::Backend {
                backend: "mpi",
                reason: format!(
                    "rank {}: batch_isend_irecv is not offered by the MPI backend, whose \
                     point-to-point runs one blocking MPI call at a time; use send/recv, or \
                     the native backend",
                    self.rank()
                ),
            }));
        }
        let n = ops.iter().map(|op| op.buf().len()).sum();
        self.enqueue_p2p("batch_isend_irecv", Shape::of::<T>(n, n), move |t| {
            let algo = t.send_recv_batch(&mut ops)?;
            Ok((ops, algo))
        })
    }

    /// Why this group failed (its first failure's root cause, here or on another rank), or
    /// `None` while it works: after a failure every collective returns an error.
    pub fn failure(&self) -> Option<String> {
        self.shared.failed.lock().unwrap().clone()
    }

    /// How long a failure waits for a peer whose connection closed to publish why, before it
    /// names that peer itself (default 500 ms: a crashing rank's own words are the better root
    /// cause). Fault tolerance sets zero.
    pub(crate) fn set_peer_word_wait(&self, wait: std::time::Duration) {
        *self.shared.peer_word_wait.lock().unwrap() = wait;
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

    /// A bitwise op needs an integer dtype, and a backend that has it.
    fn check_op<T: Element>(&self, what: &str, op: ReduceOp) -> Result<()> {
        if !op.is_bitwise() {
            return Ok(());
        }
        if !matches!(T::DTYPE, DType::I32 | DType::I64 | DType::U8) {
            return Err(self.usage(format!(
                "{what}: {op} is a bitwise op, defined on integer dtypes (i32, i64, u8), not {}",
                T::DTYPE
            )));
        }
        if self.shared.backend == "nccl" {
            return Err(Error::Backend {
                backend: "nccl",
                reason: format!(
                    "rank {}: {what} with {op}: NCCL has no bitwise reductions",
                    self.rank()
                ),
            });
        }
        Ok(())
    }

    /// Refuses `op` on a backend that does not run it, at the call, naming both.
    fn require_native(&self, op: &str) -> Result<()> {
        match self.shared.backend {
            "native" => Ok(()),
            backend => Err(Error::Backend {
                backend,
                reason: format!(
                    "rank {}: {op} is not offered by the {backend} backend yet; the native \
                     backend runs it",
                    self.rank()
                ),
            }),
        }
    }

    /// `splits` has one entry per rank and adds up to `len`.
    fn check_splits(&self, op: &str, what: &str, len: usize, splits: &[usize]) -> Result<()> {
        let n = self.world_size();
        if splits.len() != n {
            return Err(self.usage(format!(
                "{op}: {} {what} sizes given for world_size {n}",
                splits.len()
            )));
        }
        let total: usize = splits.iter().sum();
        if total != len {
            return Err(self.usage(format!(
                "{op}: the {what} sizes add up to {total} but the {what} buffer holds {len}"
            )));
        }
        Ok(())
    }

    /// A point-to-point peer: another rank of the group.
    fn check_peer(&self, peer: usize, what: &str) -> Result<()> {
        self.check_rank(peer, &format!("{what} peer"))?;
        if peer == self.rank() {
            return Err(self.usage(format!(
                "{what} peer {peer} is this rank; point-to-point needs another rank"
            )));
        }
        Ok(())
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
        if op.is_bitwise() {
            return Err(Error::Backend {
                backend: "nccl",
                reason: format!("allreduce_device with {op}: NCCL has no bitwise reductions"),
            });
        }
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
        self.require_device_buffers("broadcast_device")?;
        self.check_rank(root, "broadcast root")?;
        // SAFETY: the caller's contract.
        self.blocking("broadcast", buf.shape(), |_, t, _| unsafe {
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
