//! [`select`]: which algorithm a collective runs, decided in one place.
//!
//! Note [Choosing an algorithm]: every choice between algorithms is made here, from the
//! operation, its bytes, the group's size, where its ranks are ([`Placement`]: the links the
//! process group connected, which already folds in the shared-memory vote, `PHALANX_SHM_DISABLE`
//! and `PHALANX_SHM_SINGLE_COPY`) and the options (`PHALANX_DIRECT_MAX_BYTES`,
//! `PHALANX_ALGO=hierarchical` as [`Options::hierarchy`]). The process group's dispatch
//! (`native.rs` in phalanx-pg) asks it which family runs (shared memory, two-level, TCP) and the
//! collectives ask it which variant (direct or ring, shared buffers or single copy). Every rank
//! decides from values all ranks share (sizes every rank knows, options that must be equal on
//! every rank, a placement agreed at setup), so all take the same path. The thresholds are
//! measured (docs/collectives.md, docs/shm.md).
//!
//! ```
//! use phalanx_collectives::{select, Op, Options, Placement, Plan};
//! let o = Options::default();
//! assert_eq!(select(Op::Allreduce, 4096, 4, Placement::Tcp, &o), Plan::Direct);
//! assert_eq!(select(Op::Allreduce, 64 << 20, 4, Placement::Tcp, &o), Plan::Ring);
//! let one_host = Placement::SharedMemory { single_copy: true };
//! assert_eq!(select(Op::Allgather, 1 << 20, 2, one_host, &o), Plan::ShmSingleCopy);
//! assert_eq!(select(Op::Allgather, 4096, 2, one_host, &o), Plan::ShmBuffers);
//! ```

use crate::{Algorithm, Options};

/// A collective operation, as far as the choice of algorithm goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// allreduce.
    Allreduce,
    /// broadcast.
    Broadcast,
    /// reduce to a root.
    Reduce,
    /// allgather and allgather_v (`bytes`: the gathered total).
    Allgather,
    /// reduce_scatter and reduce_scatter_v (`bytes`: the whole input).
    ReduceScatter,
    /// all_to_all (`bytes`: the total sent by one rank); `equal`: equal blocks.
    AllToAll {
        /// Every block the same size.
        equal: bool,
    },
    /// barrier.
    Barrier,
}

/// Where a group's ranks are: the links its process group connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Every rank shares memory with every other (one host); `single_copy`: each can also
    /// read the others' memory (Note [Single copy] in `phalanx_transport::shm`).
    SharedMemory {
        /// `process_vm_readv` works among all of them.
        single_copy: bool,
    },
    /// Several hosts; this host's ranks share memory (used by the two-level allreduce).
    HostSharedMemory,
    /// TCP between every pair.
    Tcp,
}

/// What [`select`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to exchange (one rank, or no bytes).
    Local,
    /// TCP: every rank sends to every rank that needs its data, in one round.
    Direct,
    /// TCP: the pipelined ring.
    Ring,
    /// Inside hosts, then across them, over TCP alone.
    Hierarchical,
    /// Inside hosts over shared memory, then across them over TCP.
    HierarchicalShm,
    /// Shared memory, through the shared buffers (two copies, pipelined).
    ShmBuffers,
    /// Shared memory, each rank reading the sender's memory (one copy).
    ShmSingleCopy,
}

impl Plan {
    /// The algorithm as reported (`PHALANX_DEBUG=INFO`, benchmarks).
    pub fn algorithm(self) -> Algorithm {
        match self {
            Plan::Local => Algorithm::Local,
            Plan::Direct => Algorithm::Direct,
            Plan::Ring => Algorithm::Ring,
            Plan::Hierarchical | Plan::HierarchicalShm => Algorithm::Hierarchical,
            Plan::ShmBuffers | Plan::ShmSingleCopy => Algorithm::Shm,
        }
    }

    /// Whether it runs on the shared-memory group of the whole world.
    pub fn is_shared_memory(self) -> bool {
        matches!(self, Plan::ShmBuffers | Plan::ShmSingleCopy)
    }
}

/// The algorithm of `op` moving `bytes` among `world` ranks placed as `placement` (Note
/// [Choosing an algorithm]).
pub fn select(op: Op, bytes: usize, world: usize, placement: Placement, opts: &Options) -> Plan {
    if world <= 1 || (bytes == 0 && op != Op::Barrier) {
        return Plan::Local;
    }
    let direct = bytes <= opts.direct_max_bytes;
    let hierarchy = opts
        .hierarchy
        .as_ref()
        .is_some_and(|h| h.world_size() == world);
    match (placement, op) {
        // Unequal splits have no shared-memory form: TCP.
        (Placement::SharedMemory { .. }, Op::AllToAll { equal: false }) => tcp(op, direct),
        // Reduce has no shared-memory form either.
        (Placement::SharedMemory { .. }, Op::Reduce) => tcp(op, direct),
        (Placement::SharedMemory { single_copy }, _) => {
            let one_copy = single_copy
                && match op {
                    // Two ranks only, 64 KiB–1 MiB: beyond, the pipelined buffers keep root and
                    // reader copying at once; with more ranks, readers of the root's memory
                    // slow each other down (docs/shm.md).
                    Op::Broadcast => world == 2 && (64 * 1024..=1 << 20).contains(&bytes),
                    Op::Allgather | Op::AllToAll { .. } => {
                        bytes / world >= single_copy_min_bytes(world)
                    }
                    _ => false,
                };
            if one_copy {
                Plan::ShmSingleCopy
            } else {
                Plan::ShmBuffers
            }
        }
        (Placement::HostSharedMemory, Op::Allreduce) if hierarchy && !direct => {
            Plan::HierarchicalShm
        }
        (_, Op::Allreduce) if hierarchy && !direct => Plan::Hierarchical,
        _ => tcp(op, direct),
    }
}

/// Blocks (bytes per rank) from which all_gather and all_to_all read the sender's memory
/// directly when the group allows it (Note [Single copy] in `phalanx_transport::shm`): below,
/// two copies through the cache-resident shared buffers cost less than the system calls and
/// the second step. With more than two ranks the extra step costs more (every rank must be
/// scheduled for it; measured with 4 ranks on 2 cores), so the bar is higher (docs/shm.md).
pub fn single_copy_min_bytes(world: usize) -> usize {
    match world {
        0..=2 => 16 * 1024,
        _ => 128 * 1024,
    }
}

/// Whether `op` on a one-host group reads the senders' memory directly ([`Plan::ShmSingleCopy`])
/// rather than going through the shared buffers: what the shared-memory collectives ask (no
/// option bears on it; `single_copy` is the group's agreed capability).
pub(crate) fn shm_single_copy(op: Op, bytes: usize, world: usize, single_copy: bool) -> bool {
    let placement = Placement::SharedMemory { single_copy };
    select(op, bytes, world, placement, &Options::default()) == Plan::ShmSingleCopy
}

/// The TCP algorithm of `op`: direct exchange up to `direct_max_bytes` where there is one.
fn tcp(op: Op, direct: bool) -> Plan {
    match op {
        Op::Allreduce | Op::Broadcast | Op::Reduce | Op::ReduceScatter if direct => Plan::Direct,
        Op::Allreduce | Op::Broadcast | Op::Reduce | Op::Allgather | Op::ReduceScatter => {
            Plan::Ring
        }
        Op::AllToAll { .. } | Op::Barrier => Plan::Direct,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_as_measured() {
        let o = Options::default();
        let shm = |single_copy| Placement::SharedMemory { single_copy };
        // TCP: direct up to 64 KiB, the ring above.
        for op in [Op::Allreduce, Op::Broadcast, Op::Reduce, Op::ReduceScatter] {
            assert_eq!(select(op, 64 * 1024, 3, Placement::Tcp, &o), Plan::Direct);
            assert_eq!(select(op, 64 * 1024 + 1, 3, Placement::Tcp, &o), Plan::Ring);
        }
        // Broadcast reads the root's memory only with two ranks, 64 KiB to 1 MiB.
        assert_eq!(
            select(Op::Broadcast, 1 << 20, 2, shm(true), &o),
            Plan::ShmSingleCopy
        );
        assert_eq!(
            select(Op::Broadcast, 2 << 20, 2, shm(true), &o),
            Plan::ShmBuffers
        );
        assert_eq!(
            select(Op::Broadcast, 1 << 20, 3, shm(true), &o),
            Plan::ShmBuffers
        );
        assert_eq!(
            select(Op::Broadcast, 1 << 20, 2, shm(false), &o),
            Plan::ShmBuffers
        );
        // all_gather / all_to_all: per rank from 16 KiB (2 ranks) or 128 KiB.
        let eq = Op::AllToAll { equal: true };
        assert_eq!(select(eq, 32 * 1024, 2, shm(true), &o), Plan::ShmSingleCopy);
        assert_eq!(
            select(eq, 32 * 1024 - 2, 2, shm(true), &o),
            Plan::ShmBuffers
        );
        assert_eq!(
            select(Op::Allgather, 4 * 64 * 1024, 4, shm(true), &o),
            Plan::ShmBuffers
        );
        assert_eq!(
            select(Op::Allgather, 4 * 128 * 1024, 4, shm(true), &o),
            Plan::ShmSingleCopy
        );
        // Unequal all_to_all and reduce go over TCP even on one host.
        let uneq = Op::AllToAll { equal: false };
        assert_eq!(select(uneq, 1 << 20, 2, shm(true), &o), Plan::Direct);
        assert_eq!(select(Op::Reduce, 1 << 20, 2, shm(true), &o), Plan::Ring);
        // Nothing to do.
        assert_eq!(select(Op::Allreduce, 0, 4, Placement::Tcp, &o), Plan::Local);
        assert_eq!(
            select(Op::Allreduce, 1 << 20, 1, shm(true), &o),
            Plan::Local
        );
        assert_eq!(select(Op::Barrier, 0, 2, shm(true), &o), Plan::ShmBuffers);
    }
}
