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

mod algorithm;
mod allgather;
mod allreduce;
mod alltoall;
mod barrier;
mod broadcast;
mod direct;
mod fingerprint;
mod gather;
mod hierarchical;
mod hierarchy;
pub mod kernels;
mod options;
mod p2p;
mod reduce;
mod reduce_scatter;
mod ring;
pub mod segments;
mod select;
#[cfg(target_os = "linux")]
pub mod shm;
pub use algorithm::Algorithm;
pub use allgather::{allgather, allgather_v};
pub use allreduce::allreduce;
#[cfg(target_os = "linux")]
pub use allreduce::allreduce_hierarchical_shm;
pub use alltoall::all_to_all;
pub use barrier::barrier;
pub use broadcast::broadcast;
pub use gather::{gather, scatter};
pub use hierarchy::Hierarchy;
pub use options::Options;
pub use p2p::{p2p_fingerprint, recv, send, send_recv_batch, P2pRecv, P2pSend};
pub use reduce::reduce;
pub use reduce_scatter::{reduce_scatter, reduce_scatter_v, reduce_scatter_v_in_place};
pub use select::{select, single_copy_min_bytes, Op, Placement, Plan};
#[cfg(target_os = "linux")]
pub use shm::{
    all_to_all_shm, allgather_shm, allreduce_shm, allreduce_shm_with, auto_chunk_bytes,
    barrier_shm, broadcast_shm, reduce_scatter_shm, reduce_scatter_shm_in_place, ShmOptions,
};
