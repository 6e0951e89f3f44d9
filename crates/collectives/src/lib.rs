//! Collective algorithms written against [`phalanx_transport::Transport`]; they never touch a
//! socket, so the same code runs over TCP, shared memory or an in-process loopback.
//!
//! | collective | algorithm | steps | bytes sent per rank |
//! |---|---|---|---|
//! | allreduce, small | direct exchange | 1 | (n-1)·S |
//! | allreduce, large | ring reduce-scatter + allgather, chunked | 2(n-1) | 2(n-1)/n·S |
//! | allreduce, large, opt-in | [`Hierarchy`]: inside hosts, across hosts, inside hosts | 2(L-1) + 2(H-1) | 2(L-1)/L·S + 2(H-1)/(HL)·S |
//! | broadcast, small | root sends to all | 1 | root: (n-1)·S |
//! | broadcast, large | scatter + ring allgather | n | ≤ 2·S |
//! | allgather | ring | n-1 | (n-1)·S_rank |
//! | reduce_scatter, reduce_scatter_v, small | direct, each block to its owner | 1 | (n-1)/n·S |
//! | reduce_scatter, reduce_scatter_v, large | ring | n-1 | (n-1)/n·S |
//! | barrier | dissemination | ⌈log2 n⌉ | 0 payload |
//! | reduce, small | direct to the root, folded in the canonical order | 1 | S (root receives (n-1)·S) |
//! | reduce, large | ring reduce-scatter + segments to the root | n | (n-1)/n·S + S/n |
//! | gather / scatter | direct, root ↔ every rank | 1 | S_rank (root: (n-1)·S_rank) |
//! | all_to_all (equal or unequal splits) | direct, every pair at once | 1 | Σ blocks to others |
//! | allgather_v (unequal blocks) | ring | n-1 | Σ other ranks' blocks |
//! | send/recv, batches | per-pair sequence, any order against collectives | 1 | S |
//!
//! All reducing algorithms use one canonical order (see [`segments`]), so a result is bitwise
//! the same whichever algorithm or transport produced it.
//!
//! ```
//! use std::{net::SocketAddr, time::Duration};
//! use phalanx_core::ReduceOp;
//! use phalanx_collectives::{allreduce, Options};
//! use phalanx_transport::{tcp, MeshConfig, TcpTransport};
//!
//! let listeners: Vec<_> = (0..3).map(|_| tcp::listen([127, 0, 0, 1].into()).unwrap()).collect();
//! let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
//! std::thread::scope(|s| {
//!     for (rank, listener) in listeners.into_iter().enumerate() {
//!         let addrs = addrs.clone();
//!         s.spawn(move || {
//!             let cfg = MeshConfig { rank, world_size: 3, job_id: "doc".into(),
//!                                    token: vec![], timeout: Duration::from_secs(10) };
//!             let mut t = TcpTransport::connect(&cfg, listener, &addrs).unwrap();
//!             let mut v = vec![rank as f32; 10];
//!             allreduce(&mut t, 0, &mut v, ReduceOp::Sum, &Options::default()).unwrap();
//!             assert_eq!(v, vec![3.0; 10]);
//!         });
//!     }
//! });
//! ```
#![warn(missing_docs, unreachable_pub)]

mod allgather;
mod allreduce;
mod alltoall;
mod barrier;
mod broadcast;
mod direct;
mod gather;
mod hierarchical;
pub mod kernels;
mod p2p;
mod reduce;
mod reduce_scatter;
mod ring;
pub mod segments;
mod select;
#[cfg(target_os = "linux")]
pub mod shm;
pub use allgather::{allgather, allgather_v};
pub use allreduce::allreduce;
#[cfg(target_os = "linux")]
pub use allreduce::allreduce_hierarchical_shm;
pub use alltoall::all_to_all;
pub use barrier::barrier;
pub use broadcast::broadcast;
pub use gather::{gather, scatter};
pub use hierarchical::Hierarchy;
pub use p2p::{p2p_fingerprint, recv, send, send_recv_batch, P2pRecv, P2pSend};
use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{CollectiveKind, Fingerprint};
pub use reduce::reduce;
pub use reduce_scatter::{reduce_scatter, reduce_scatter_v, reduce_scatter_v_in_place};
pub use select::{select, single_copy_min_bytes, Op, Placement, Plan};
#[cfg(target_os = "linux")]
pub use shm::{
    all_to_all_shm, allgather_shm, allreduce_shm, allreduce_shm_with, auto_chunk_bytes,
    barrier_shm, broadcast_shm, reduce_scatter_shm, reduce_scatter_shm_in_place, ShmOptions,
};

/// Tuning of algorithm choice; defaults measured on loopback TCP (see docs/collectives.md).
#[derive(Debug, Clone)]
pub struct Options {
    /// Largest frame of a pipelined ring step, in bytes.
    pub chunk_bytes: usize,
    /// Buffers up to this size (bytes) use direct exchange rather than the ring.
    pub direct_max_bytes: usize,
    /// Use shared memory when every rank is on one host (the process group decides at setup).
    pub shared_memory: bool,
    /// Asks for the two-level allreduce when hosts hold several ranks each
    /// (`PHALANX_ALGO=hierarchical`); the process group turns it into `hierarchy` if the
    /// layout qualifies.
    pub prefer_hierarchical: bool,
    /// Allreduce above `direct_max_bytes` in two levels, inside hosts then across them
    /// (`PHALANX_ALGO=hierarchical`; see [`Hierarchy`] for what it gives up). Set by the process
    /// group from its peer table; `None`: the flat algorithms, in the canonical order.
    pub hierarchy: Option<Hierarchy>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            chunk_bytes: 512 * 1024,
            direct_max_bytes: 64 * 1024,
            shared_memory: true,
            prefer_hierarchical: false,
            hierarchy: None,
        }
    }
}

/// Which algorithm a collective used (reported by `PHALANX_DEBUG=INFO` and benchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Nothing to exchange (one rank, or zero elements).
    Local,
    /// Direct exchange.
    Direct,
    /// Ring.
    Ring,
    /// Dissemination (barrier).
    Dissemination,
    /// Shared memory between the ranks of one host (`shm`).
    Shm,
    /// Inside hosts, then across them (`hierarchical`).
    Hierarchical,
}

fn fp<T: Element>(
    seq: u64,
    kind: CollectiveKind,
    op: Option<ReduceOp>,
    count: usize,
    root: usize,
) -> Fingerprint {
    Fingerprint {
        seq,
        kind,
        op,
        dtype: T::DTYPE,
        count: count as u64,
        root: root as u32,
    }
}

fn chunk_elems<T>(opts: &Options) -> usize {
    (opts.chunk_bytes / std::mem::size_of::<T>().max(1)).max(1)
}
