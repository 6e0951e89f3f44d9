//! [`Backend`]: what runs a process group's collectives (Note [One backend] in `exec.rs`).
//!
//! The name is c10d's: `c10d::Backend` is the class that `ProcessGroupGloo`, `ProcessGroupNCCL`
//! and `ProcessGroupMPI` derive from, and a `ProcessGroup` hands each collective to its backend.
//! The public enum of backend names is [`BackendType`](crate::BackendType), c10d's
//! `ProcessGroup::BackendType`, so the one word does not name two things.

use phalanx_collectives::{Algorithm, Options};
use phalanx_core::{Element, ReduceOp};

use crate::P2POp;

/// What a collective returns: the algorithm it ran.
pub(crate) type Ran = phalanx_transport::Result<Algorithm>;

/// One backend: phalanx's own (`native.rs`), MPI (`mpi/`) or NCCL (`nccl/`).
///
/// Every method runs one collective to completion under the group's `Exec` lock, after
/// `ProcessGroup` checked the arguments (`check.rs`): buffer lengths, ranks, and whether this
/// backend offers the collective at all. `seq` is the group's collective sequence number;
/// point-to-point operations have none here, a backend that needs one numbers each pair's
/// messages itself. Generic methods make the trait not object-safe, on purpose: `Exec`
/// dispatches over the enum of backends (Note [One backend]).
pub(crate) trait Backend {
    /// The backend's name, as `--backend` spells it (`native`, `mpi`, `nccl`).
    fn name(&self) -> &'static str;

    /// The name of what ran a collective that returned `algo`, for traces and
    /// `PHALANX_DEBUG=INFO`.
    fn describe(&self, algo: Algorithm) -> String;

    /// Whether phalanx picks each collective's algorithm (Note [Choosing an algorithm]), which
    /// `PHALANX_DEBUG=INFO` then reports per collective; a library that picks inside itself
    /// (MPI, NCCL) is reported once at init.
    fn picks_algorithm(&self) -> bool {
        false
    }

    /// Whether a send completes with no receive posted for it, whatever its size, once its
    /// peer waits in any point-to-point operation ([`crate::ProcessGroup::sends_complete_alone`]).
    /// A library whose large sends may wait for their receive (MPI's rendezvous protocol,
    /// NCCL) does not promise it.
    fn sends_complete_alone(&self) -> bool {
        false
    }

    /// Reduces `buf` across ranks in place.
    fn allreduce<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran;

    /// Copies `root`'s `buf` to every rank.
    fn broadcast<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        root: usize,
        opts: &Options,
    ) -> Ran;

    /// Returns when every rank has entered it.
    fn barrier(&mut self, seq: u64) -> Ran;

    /// Every rank's `send`, in rank order, into `recv` (`world_size × send.len()`).
    fn allgather<T: Element>(
        &mut self,
        seq: u64,
        send: &[T],
        recv: &mut [T],
        opts: &Options,
    ) -> Ran;

    /// Reduces `send` (`world_size` blocks of `recv.len()`); block `rank` lands in `recv`.
    fn reduce_scatter<T: Element>(
        &mut self,
        seq: u64,
        send: &mut [T],
        recv: &mut [T],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran;

    /// Sends `buf` to `peer` with `tag`.
    fn send<T: Element>(&mut self, buf: &[T], peer: usize, tag: u32) -> Ran;

    /// Receives into `buf` from `peer` what it sent with `tag`.
    fn recv<T: Element>(&mut self, buf: &mut [T], peer: usize, tag: u32) -> Ran;

    /// Stops every link so that peers learn of the failure at once (Note [Fail fast]);
    /// `rank` is this rank, for a backend that reports the failure itself.
    fn abort(&mut self, rank: usize, cause: &str);

    /// How long a wait spins before it sleeps ([`crate::ProcessGroup::set_wait_spin`]); a
    /// backend whose waits are not its own ignores it.
    fn set_wait_spin(&mut self, _spin: std::time::Duration) {}

    /// Starts reading the peers' messages ahead between operations
    /// ([`crate::ProcessGroup::start_progress`]); a backend whose library moves its own bytes
    /// (MPI, NCCL) ignores it.
    fn start_progress(&mut self) -> phalanx_transport::Result<()> {
        Ok(())
    }

    // === What not every backend offers: `ProcessGroup` refuses these before they get here
    // (`check::Caller::native`, `check::Caller::batch`), so the defaults never run. ===

    /// Every send and receive of `ops` at once (`batch_isend_irecv`).
    fn send_recv_batch<T: Element>(&mut self, _ops: &mut [P2POp<T>]) -> Ran {
        refused(self.name(), "batch_isend_irecv")
    }

    /// Reduces `buf` across ranks into `root`'s `buf`.
    fn reduce<T: Element>(
        &mut self,
        _seq: u64,
        _buf: &mut [T],
        _op: ReduceOp,
        _root: usize,
        _opts: &Options,
    ) -> Ran {
        refused(self.name(), "reduce")
    }

    /// Every rank's `send` into `root`'s `recv`, in rank order.
    fn gather<T: Element>(&mut self, _seq: u64, _send: &[T], _recv: &mut [T], _root: usize) -> Ran {
        refused(self.name(), "gather")
    }

    /// Block `p` of `root`'s `send` into rank `p`'s `recv`.
    fn scatter<T: Element>(
        &mut self,
        _seq: u64,
        _send: &[T],
        _recv: &mut [T],
        _root: usize,
    ) -> Ran {
        refused(self.name(), "scatter")
    }

    /// `send_counts[p]` elements to rank `p`, `recv_counts[p]` from it; `equal`: every rank
    /// asked for equal blocks (the same API on every rank).
    fn all_to_all<T: Element>(
        &mut self,
        _seq: u64,
        _send: &[T],
        _send_counts: &[usize],
        _recv: &mut [T],
        _recv_counts: &[usize],
        _equal: bool,
    ) -> Ran {
        refused(self.name(), "all_to_all")
    }

    /// Blocks of `counts[p]` elements from each rank `p`, into every rank's `recv`.
    fn allgather_v<T: Element>(
        &mut self,
        _seq: u64,
        _send: &[T],
        _recv: &mut [T],
        _counts: &[usize],
        _opts: &Options,
    ) -> Ran {
        refused(self.name(), "allgather_v")
    }

    /// reduce_scatter of blocks of `counts[p]` elements; this rank's block lands in `recv`.
    fn reduce_scatter_v<T: Element>(
        &mut self,
        _seq: u64,
        _send: &mut [T],
        _recv: &mut [T],
        _counts: &[usize],
        _op: ReduceOp,
        _opts: &Options,
    ) -> Ran {
        refused(self.name(), "reduce_scatter_v")
    }

    /// reduce_scatter_v leaving this rank's block of `buf` reduced in place.
    fn reduce_scatter_v_in_place<T: Element>(
        &mut self,
        _seq: u64,
        _buf: &mut [T],
        _counts: &[usize],
        _op: ReduceOp,
        _opts: &Options,
    ) -> Ran {
        refused(self.name(), "reduce_scatter_v")
    }
}

/// A collective that `ProcessGroup` refuses on `backend` before it reaches the backend.
fn refused(backend: &str, op: &str) -> ! {
    unreachable!("ProcessGroup refuses {op} on the {backend} backend before it runs")
}
