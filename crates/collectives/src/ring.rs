//! The ring: reduce-scatter and allgather phases, chunked so that transfers are pipelined.
//!
//! Steps: `world - 1` reduce-scatter steps then `world - 1` allgather steps; at each step a
//! rank sends one segment to `rank + 1` while receiving another from `rank - 1`.
//! Bytes on the wire per rank: `2 (world - 1) / world × size`, the bandwidth optimum.
//! Each segment is cut into chunks of at most `chunk` elements, one frame each, so that the
//! reduction of one chunk overlaps the transfer of the next in the kernel's socket buffers.
//!
//! A ring is a list of ranks (`members`, in ring order; the whole group for the flat
//! algorithms, one host's ranks or one rail for the hierarchical one); segments are indexed
//! by position in that list.

use std::ops::Range;

use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{Fingerprint, RecvReq, Result, SendReq, Transport};

use crate::{kernels::reduce_into, segments};

/// Reduce-scatter over `segs(s)`: afterwards this rank's segment `segs(rank)` of `buf` holds
/// the reduction of every rank's values in the canonical order (not yet divided for `Avg`).
pub(crate) fn reduce_scatter<T: Element>(
    t: &mut dyn Transport,
    fp: &Fingerprint,
    members: &[usize],
    buf: &mut [T],
    segs: &dyn Fn(usize) -> Range<usize>,
    op: ReduceOp,
    chunk: usize,
) -> Result<()> {
    let (n, r, next, prev) = place(t.rank(), members);
    let mut tmp: Vec<T> = Vec::new();
    for k in 0..n - 1 {
        let send_seg = segs((r + 2 * n - k - 1) % n);
        let recv_seg = segs((r + 2 * n - k - 2) % n);
        let steps = segments::num_chunks(send_seg.len(), chunk)
            .max(segments::num_chunks(recv_seg.len(), chunk));
        for j in 0..steps {
            let sc = segments::chunk(&send_seg, chunk, j);
            let rc = segments::chunk(&recv_seg, chunk, j);
            tmp.resize(rc.len(), T::zeroed());
            {
                let sends = sends_if(next, bytemuck::cast_slice(&buf[sc.clone()]), !sc.is_empty());
                let mut recvs =
                    recvs_if(prev, bytemuck::cast_slice_mut(&mut tmp[..]), !rc.is_empty());
                t.exchange(fp, &sends, &mut recvs)?;
            }
            reduce_into(op, &mut buf[rc], &tmp);
        }
    }
    Ok(())
}

/// Allgather over `segs(s)`: this rank's segment `segs(rank)` is complete; afterwards every
/// segment is.
pub(crate) fn allgather<T: Element>(
    t: &mut dyn Transport,
    fp: &Fingerprint,
    members: &[usize],
    buf: &mut [T],
    segs: &dyn Fn(usize) -> Range<usize>,
    chunk: usize,
) -> Result<()> {
    let (n, r, next, prev) = place(t.rank(), members);
    for k in 0..n - 1 {
        let send_seg = segs((r + n - k) % n);
        let recv_seg = segs((r + 2 * n - k - 1) % n);
        let steps = segments::num_chunks(send_seg.len(), chunk)
            .max(segments::num_chunks(recv_seg.len(), chunk));
        for j in 0..steps {
            let sc = segments::chunk(&send_seg, chunk, j);
            let rc = segments::chunk(&recv_seg, chunk, j);
            let (src, dst) = disjoint(buf, sc.clone(), rc.clone());
            let sends = sends_if(next, bytemuck::cast_slice(src), !sc.is_empty());
            let mut recvs = recvs_if(prev, bytemuck::cast_slice_mut(dst), !rc.is_empty());
            t.exchange(fp, &sends, &mut recvs)?;
        }
    }
    Ok(())
}

/// Every rank of the group, in rank order: the flat ring.
pub(crate) fn everyone(world: usize) -> Vec<usize> {
    (0..world).collect()
}

/// `(ring size, this rank's position, next rank, previous rank)`.
fn place(rank: usize, members: &[usize]) -> (usize, usize, usize, usize) {
    let n = members.len();
    let r = members
        .iter()
        .position(|&m| m == rank)
        .expect("a rank runs only the rings it belongs to");
    (n, r, members[(r + 1) % n], members[(r + n - 1) % n])
}

fn sends_if(peer: usize, data: &[u8], yes: bool) -> Vec<SendReq<'_>> {
    if yes {
        vec![SendReq { peer, data }]
    } else {
        Vec::new()
    }
}

fn recvs_if(peer: usize, buf: &mut [u8], yes: bool) -> Vec<RecvReq<'_>> {
    if yes {
        vec![RecvReq { peer, buf }]
    } else {
        Vec::new()
    }
}

/// Borrows two disjoint ranges of one buffer, the first shared and the second mutable.
pub(crate) fn disjoint<T>(buf: &mut [T], a: Range<usize>, b: Range<usize>) -> (&[T], &mut [T]) {
    // An empty range may sit at the other's start (blocks of zero elements, allgather_v).
    if a.is_empty() {
        return (&[], &mut buf[b]);
    }
    if b.is_empty() {
        return (&buf[a], &mut []);
    }
    assert!(a.end <= b.start || b.end <= a.start, "ranges overlap");
    if a.start < b.start {
        let (lo, hi) = buf.split_at_mut(b.start);
        (&lo[a], &mut hi[..b.end - b.start])
    } else {
        let (lo, hi) = buf.split_at_mut(a.start);
        (&hi[..a.end - a.start], &mut lo[b])
    }
}
