//! [`Exec`]: a group's backend and its collective sequence number, and the dispatch of each
//! collective to the backend.
//!
//! Note [One backend]: a process group has one backend for its lifetime, an implementation of the
//! crate-private trait [`Backend`] (c10d's word: `ProcessGroupGloo`, `ProcessGroupNCCL` and
//! `ProcessGroupMPI` are `c10d::Backend`s). `Native` (`native.rs`) runs phalanx's own
//! algorithms (`phalanx-collectives`, chosen by `phalanx_collectives::select`) over the TCP
//! mesh and, within one host, shared memory; `MpiComm` (`mpi/`) hands every collective to the
//! MPI library on `MPI_COMM_WORLD`; `NcclComm` (`nccl/`) runs allreduce, broadcast, allgather,
//! reduce_scatter and barrier in NCCL on this rank's GPU, and send/recv over a native mesh
//! (Note [NCCL buffers] in `nccl/mod.rs`). Everything above this file (argument checks, issue
//! order, `Work`, fail-fast, traces, DDP, the trainer) is the same for all of them: it only
//! sees `Exec`'s methods.
//!
//! The collectives are generic over the element type (`T: Element`), so the trait is not
//! object-safe and a `Box<dyn Backend>` is impossible. The backends are instead the variants
//! of one enum, [`AnyBackend`], and the one `match` over them is the `dispatch!` macro, which
//! every `Exec` method expands in one line; each variant and arm is `cfg`'ed by its cargo
//! feature in that one place. A fourth backend is one new file implementing [`Backend`], one
//! variant of [`AnyBackend`] and its arm in `dispatch!`, beside each other below (and its
//! `init_*` function). What a backend does not offer has a default method that is never
//! reached: `ProcessGroup` refuses it first, naming the backend (`check.rs`).

use phalanx_collectives::{Algorithm, Options};
use phalanx_core::{Element, ReduceOp};

use crate::{
    backend::{Backend, Ran},
    native::Native,
    P2POp,
};

/// The backend of a group (Note [One backend]): one variant per implementation of [`Backend`].
// One per group, created once and never moved out of its `Exec`: the size of the largest
// variant costs nothing, and boxing it would cost an indirection on every collective.
#[allow(clippy::large_enum_variant)]
pub(crate) enum AnyBackend {
    /// Phalanx's own: TCP, and shared memory within a host.
    Native(Native),
    /// The MPI library's collectives.
    #[cfg(feature = "mpi")]
    Mpi(crate::mpi::MpiComm),
    /// NCCL's collectives on this rank's GPU.
    #[cfg(feature = "nccl")]
    Nccl(Box<crate::nccl::NcclComm>),
}

/// `dispatch!(backend, b => expr)`: `expr` with `b` bound to the backend inside `backend` (an
/// `&AnyBackend` or `&mut AnyBackend`): the one `match` over the backends (Note [One backend]).
macro_rules! dispatch {
    ($backend:expr, $b:ident => $call:expr) => {
        match $backend {
            AnyBackend::Native($b) => $call,
            #[cfg(feature = "mpi")]
            AnyBackend::Mpi($b) => $call,
            #[cfg(feature = "nccl")]
            AnyBackend::Nccl($b) => $call,
        }
    };
}

/// A group's backend and its collective sequence number.
pub(crate) struct Exec {
    backend: AnyBackend,
    /// The group's collective sequence: every rank's collectives in issue order.
    pub(crate) seq: u64,
}

impl Exec {
    pub(crate) fn new(backend: AnyBackend) -> Exec {
        Exec { backend, seq: 0 }
    }

    /// The backend's name, as `--backend` spells it.
    pub(crate) fn name(&self) -> &'static str {
        dispatch!(&self.backend, b => b.name())
    }

    /// The name of what ran a collective, for traces and `PHALANX_DEBUG=INFO`.
    pub(crate) fn describe(&self, algo: Algorithm) -> String {
        dispatch!(&self.backend, b => b.describe(algo))
    }

    /// Whether phalanx picked the algorithm (reported per collective at INFO level).
    pub(crate) fn picks_algorithm(&self) -> bool {
        dispatch!(&self.backend, b => b.picks_algorithm())
    }

    /// Whether a send completes with no receive posted for it.
    pub(crate) fn sends_complete_alone(&self) -> bool {
        dispatch!(&self.backend, b => b.sends_complete_alone())
    }

    pub(crate) fn allreduce<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran {
        dispatch!(&mut self.backend, b => b.allreduce(seq, buf, op, opts))
    }

    pub(crate) fn broadcast<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        root: usize,
        opts: &Options,
    ) -> Ran {
        dispatch!(&mut self.backend, b => b.broadcast(seq, buf, root, opts))
    }

    pub(crate) fn barrier(&mut self, seq: u64) -> Ran {
        dispatch!(&mut self.backend, b => b.barrier(seq))
    }

    pub(crate) fn allgather<T: Element>(
        &mut self,
        seq: u64,
        send: &[T],
        recv: &mut [T],
        opts: &Options,
    ) -> Ran {
        dispatch!(&mut self.backend, b => b.allgather(seq, send, recv, opts))
    }

    pub(crate) fn reduce_scatter<T: Element>(
        &mut self,
        seq: u64,
        send: &mut [T],
        recv: &mut [T],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran {
        dispatch!(&mut self.backend, b => b.reduce_scatter(seq, send, recv, op, opts))
    }

    pub(crate) fn send<T: Element>(&mut self, buf: &[T], peer: usize, tag: u32) -> Ran {
        dispatch!(&mut self.backend, b => b.send(buf, peer, tag))
    }

    pub(crate) fn recv<T: Element>(&mut self, buf: &mut [T], peer: usize, tag: u32) -> Ran {
        dispatch!(&mut self.backend, b => b.recv(buf, peer, tag))
    }

    /// Every send and receive of `ops` at once (`batch_isend_irecv`).
    pub(crate) fn send_recv_batch<T: Element>(&mut self, ops: &mut [P2POp<T>]) -> Ran {
        dispatch!(&mut self.backend, b => b.send_recv_batch(ops))
    }

    pub(crate) fn reduce<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        op: ReduceOp,
        root: usize,
        opts: &Options,
    ) -> Ran {
        dispatch!(&mut self.backend, b => b.reduce(seq, buf, op, root, opts))
    }

    pub(crate) fn gather<T: Element>(
        &mut self,
        seq: u64,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Ran {
        dispatch!(&mut self.backend, b => b.gather(seq, send, recv, root))
    }

    pub(crate) fn scatter<T: Element>(
        &mut self,
        seq: u64,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Ran {
        dispatch!(&mut self.backend, b => b.scatter(seq, send, recv, root))
    }

    pub(crate) fn all_to_all<T: Element>(
        &mut self,
        seq: u64,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        equal: bool,
    ) -> Ran {
        let (s, sc, r, rc) = (send, send_counts, recv, recv_counts);
        dispatch!(&mut self.backend, b => b.all_to_all(seq, s, sc, r, rc, equal))
    }

    pub(crate) fn allgather_v<T: Element>(
        &mut self,
        seq: u64,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        opts: &Options,
    ) -> Ran {
        dispatch!(&mut self.backend, b => b.allgather_v(seq, send, recv, counts, opts))
    }

    pub(crate) fn reduce_scatter_v<T: Element>(
        &mut self,
        seq: u64,
        send: &mut [T],
        recv: &mut [T],
        counts: &[usize],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran {
        dispatch!(&mut self.backend, b => b.reduce_scatter_v(seq, send, recv, counts, op, opts))
    }

    /// reduce_scatter_v leaving this rank's block of `buf` reduced in place.
    pub(crate) fn reduce_scatter_v_in_place<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        counts: &[usize],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran {
        dispatch!(&mut self.backend, b => b.reduce_scatter_v_in_place(seq, buf, counts, op, opts))
    }

    /// Stops every link so that peers learn of the failure at once (Note [Fail fast]).
    pub(crate) fn abort(&mut self, rank: usize, cause: &str) {
        dispatch!(&mut self.backend, b => b.abort(rank, cause))
    }

    /// How long the backend's waits spin before they sleep.
    pub(crate) fn set_wait_spin(&mut self, spin: std::time::Duration) {
        dispatch!(&mut self.backend, b => b.set_wait_spin(spin))
    }

    pub(crate) fn start_progress(&mut self) -> phalanx_transport::Result<()> {
        dispatch!(&mut self.backend, b => b.start_progress())
    }

    /// NCCL's allreduce of GPU memory in place (`Avg` divides on the device, `ncclAvg`).
    ///
    /// # Safety
    /// As `ProcessGroup::allreduce_device`; the caller checked that the backend is NCCL.
    #[cfg(feature = "nccl")]
    pub(crate) unsafe fn allreduce_device(&mut self, buf: crate::DeviceSlice, op: ReduceOp) -> Ran {
        // SAFETY: the caller's contract.
        unsafe { self.nccl().allreduce_in_place(buf, op) }
    }

    /// NCCL's broadcast of GPU memory in place.
    ///
    /// # Safety
    /// As `ProcessGroup::broadcast_device`; the caller checked that the backend is NCCL.
    #[cfg(feature = "nccl")]
    pub(crate) unsafe fn broadcast_device(&mut self, buf: crate::DeviceSlice, root: usize) -> Ran {
        // SAFETY: the caller's contract.
        unsafe { self.nccl().broadcast_in_place(buf, root) }
    }

    /// The NCCL backend, for the collectives on GPU memory that only it runs.
    #[cfg(feature = "nccl")]
    fn nccl(&mut self) -> &mut crate::nccl::NcclComm {
        let AnyBackend::Nccl(n) = &mut self.backend else {
            unreachable!("checked by require_device_buffers; a group keeps its backend")
        };
        n
    }
}
