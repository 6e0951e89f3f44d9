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
//! | reduce_scatter | ring | n-1 | (n-1)·S_rank |
//! | barrier | dissemination | ⌈log2 n⌉ | 0 payload |
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

mod direct;
mod hierarchical;
pub mod reduce;
mod ring;
pub mod segments;
#[cfg(target_os = "linux")]
mod shm_allgather;
#[cfg(target_os = "linux")]
pub mod shm_allreduce;
#[cfg(target_os = "linux")]
pub use shm_allreduce::{
    allreduce_shm, allreduce_shm_with, auto_chunk_bytes, barrier_shm, broadcast_shm, ShmOptions,
};

pub use hierarchical::Hierarchy;
use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{CollectiveKind, Fingerprint, RecvReq, Result, SendReq, Transport};

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
    /// Shared memory between the ranks of one host (`shm_allreduce`).
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

/// Reduces `buf` across ranks in place; every rank ends with the same bits.
pub fn allreduce<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    buf: &mut [T],
    op: ReduceOp,
    opts: &Options,
) -> Result<Algorithm> {
    let n = t.world_size();
    let fp = fp::<T>(seq, CollectiveKind::Allreduce, Some(op), buf.len(), 0);
    let algo = if n == 1 || buf.is_empty() {
        Algorithm::Local
    } else if std::mem::size_of_val(buf) <= opts.direct_max_bytes {
        direct::allreduce(t, &fp, buf, op)?;
        Algorithm::Direct
    } else if let Some(h) = opts.hierarchy.as_ref().filter(|h| h.world_size() == n) {
        hierarchical::allreduce(t, &fp, h, buf, op, chunk_elems::<T>(opts))?;
        return Ok(Algorithm::Hierarchical);
    } else {
        let count = buf.len();
        let segs = move |s| segments::segment(count, n, s);
        let all = ring::everyone(n);
        ring::reduce_scatter(t, &fp, &all, buf, &segs, op, chunk_elems::<T>(opts))?;
        let mine = segs(t.rank());
        reduce::finish(op, &mut buf[mine], n);
        ring::allgather(t, &fp, &all, buf, &segs, chunk_elems::<T>(opts))?;
        return Ok(Algorithm::Ring);
    };
    reduce::finish(op, buf, n);
    Ok(algo)
}

/// [`allreduce`] for a job spread over several hosts whose ranks share memory with their
/// host's other ranks (`g`, ordered as [`Hierarchy::host_of`]): above `direct_max_bytes` and
/// with `opts.hierarchy` set, the two-level algorithm with shared memory inside the host;
/// otherwise exactly [`allreduce`] over `t`.
#[cfg(target_os = "linux")]
pub fn allreduce_hierarchical_shm<T: Element>(
    t: &mut dyn Transport,
    g: &mut phalanx_transport::shm::ShmGroup,
    seq: u64,
    buf: &mut [T],
    op: ReduceOp,
    opts: &Options,
) -> Result<Algorithm> {
    let n = t.world_size();
    match opts.hierarchy.as_ref() {
        Some(h) if h.world_size() == n && std::mem::size_of_val(buf) > opts.direct_max_bytes => {
            hierarchical::allreduce_shm(t, g, seq, h, buf, op, chunk_elems::<T>(opts))?;
            Ok(Algorithm::Hierarchical)
        }
        _ => allreduce(t, seq, buf, op, opts),
    }
}

/// Copies `root`'s `buf` to every rank.
pub fn broadcast<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    buf: &mut [T],
    root: usize,
    opts: &Options,
) -> Result<Algorithm> {
    let (n, r) = (t.world_size(), t.rank());
    let fp = fp::<T>(seq, CollectiveKind::Broadcast, None, buf.len(), root);
    if n == 1 || buf.is_empty() {
        return Ok(Algorithm::Local);
    }
    if std::mem::size_of_val(buf) <= opts.direct_max_bytes {
        if r == root {
            let data: &[u8] = bytemuck::cast_slice(buf);
            let sends: Vec<_> = (0..n)
                .filter(|&p| p != r)
                .map(|peer| SendReq { peer, data })
                .collect();
            t.exchange(&fp, &sends, &mut [])?;
        } else {
            t.recv(&fp, root, bytemuck::cast_slice_mut(buf))?;
        }
        return Ok(Algorithm::Direct);
    }
    // Scatter: the root hands segment p to rank p (segments relative to the root so that the
    // root keeps its own), then a ring allgather completes every rank.
    let count = buf.len();
    let segs = move |s| segments::segment(count, n, (s + n - root) % n);
    if r == root {
        let bytes: Vec<(usize, std::ops::Range<usize>)> = (0..n)
            .filter(|&p| p != r)
            .map(|p| (p, segs(p)))
            .filter(|(_, s)| !s.is_empty())
            .collect();
        let sends: Vec<_> = bytes
            .iter()
            .map(|(peer, s)| SendReq {
                peer: *peer,
                data: bytemuck::cast_slice(&buf[s.clone()]),
            })
            .collect();
        t.exchange(&fp, &sends, &mut [])?;
    } else {
        let mine = segs(r);
        if !mine.is_empty() {
            t.recv(&fp, root, bytemuck::cast_slice_mut(&mut buf[mine]))?;
        }
    }
    ring::allgather(
        t,
        &fp,
        &ring::everyone(n),
        buf,
        &segs,
        chunk_elems::<T>(opts),
    )?;
    Ok(Algorithm::Ring)
}

/// Gathers every rank's `send` into `recv` (rank `p`'s block at `p * send.len()`).
pub fn allgather<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    send: &[T],
    recv: &mut [T],
    opts: &Options,
) -> Result<Algorithm> {
    let (n, r) = (t.world_size(), t.rank());
    assert_eq!(
        recv.len(),
        send.len() * n,
        "allgather: recv must hold world_size × send"
    );
    let per = send.len();
    recv[r * per..(r + 1) * per].copy_from_slice(send);
    if n == 1 || per == 0 {
        return Ok(Algorithm::Local);
    }
    let fp = fp::<T>(seq, CollectiveKind::Allgather, None, per, 0);
    ring::allgather(
        t,
        &fp,
        &ring::everyone(n),
        recv,
        &|s| s * per..(s + 1) * per,
        chunk_elems::<T>(opts),
    )?;
    Ok(Algorithm::Ring)
}

/// Reduces `send` (world_size blocks) across ranks; rank `p` receives block `p` in `recv`.
pub fn reduce_scatter<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    send: &mut [T],
    recv: &mut [T],
    op: ReduceOp,
    opts: &Options,
) -> Result<Algorithm> {
    let (n, r) = (t.world_size(), t.rank());
    let per = recv.len();
    assert_eq!(
        send.len(),
        per * n,
        "reduce_scatter: send must hold world_size × recv"
    );
    let fp = fp::<T>(seq, CollectiveKind::ReduceScatter, Some(op), send.len(), 0);
    let algo = if n == 1 || per == 0 {
        Algorithm::Local
    } else {
        ring::reduce_scatter(
            t,
            &fp,
            &ring::everyone(n),
            send,
            &|s| s * per..(s + 1) * per,
            op,
            chunk_elems::<T>(opts),
        )?;
        Algorithm::Ring
    };
    recv.copy_from_slice(&send[r * per..(r + 1) * per]);
    reduce::finish(op, recv, n);
    Ok(algo)
}

/// Returns once every rank has entered the barrier.
pub fn barrier(t: &mut dyn Transport, seq: u64) -> Result<Algorithm> {
    let (n, r) = (t.world_size(), t.rank());
    if n == 1 {
        return Ok(Algorithm::Local);
    }
    let fp = fp::<u8>(seq, CollectiveKind::Barrier, None, 0, 0);
    let mut dist = 1;
    while dist < n {
        let to = (r + dist) % n;
        let from = (r + n - dist) % n;
        t.exchange(
            &fp,
            &[SendReq {
                peer: to,
                data: &[],
            }],
            &mut [RecvReq {
                peer: from,
                buf: &mut [],
            }],
        )?;
        dist *= 2;
    }
    Ok(Algorithm::Dissemination)
}

/// Sends `buf` to `peer`; matched by a [`recv`] with the same `tag` there.
pub fn send<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    buf: &[T],
    peer: usize,
    tag: u32,
) -> Result<()> {
    let fp = fp::<T>(seq, CollectiveKind::SendRecv, None, buf.len(), tag as usize);
    t.send(&fp, peer, bytemuck::cast_slice(buf))
}

/// Receives into `buf` from `peer`.
pub fn recv<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    buf: &mut [T],
    peer: usize,
    tag: u32,
) -> Result<()> {
    let fp = fp::<T>(seq, CollectiveKind::SendRecv, None, buf.len(), tag as usize);
    t.recv(&fp, peer, bytemuck::cast_slice_mut(buf))
}
