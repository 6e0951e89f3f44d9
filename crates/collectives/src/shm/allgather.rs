//! Allgather of per-rank slices of one buffer over a [`ShmGroup`] (the last phase of the
//! hierarchical allreduce inside a host, and allgather/allgather_v among the ranks of one
//! host), and all_to_all of equal blocks. Rank `r` owns `slice(r)`; per chunk, every rank copies
//! its slice's chunk into its own shared buffer, one step publishes them all, and every rank
//! copies the peers' chunks out.

use std::ops::Range;

use phalanx_core::Element;
use phalanx_transport::{shm::ShmGroup, CollectiveKind, Fingerprint, Result};

use super::bytes::{as_bytes, as_bytes_mut};
use crate::{segments, select::shm_single_copy, Algorithm, Op};

/// After this, every rank's `buf` holds every rank's `slice(p)`.
pub(crate) fn allgather_slices<T: Element>(
    g: &mut ShmGroup,
    fp: &Fingerprint,
    buf: &mut [T],
    slice: &dyn Fn(usize) -> Range<usize>,
) -> Result<()> {
    let (n, r) = (g.world_size(), g.rank());
    let size = std::mem::size_of::<T>();
    let chunk = (g.buffer_bytes() / size).max(1);
    let chunks = (0..n)
        .map(|p| segments::num_chunks(slice(p).len(), chunk))
        .max()
        .unwrap_or(0);
    for k in 0..chunks {
        let b = g.next_buffer();
        let mine = segments::chunk(&slice(r), chunk, k);
        // SAFETY: peers last read buffer `b` in the use before the previous one and finished
        // before that use's step, which this rank has passed (Note [Shared-memory protocol]).
        unsafe { g.own_buffer_mut(b, 0..mine.len() * size) }
            .copy_from_slice(bytemuck::cast_slice(&buf[mine]));
        g.step_all(fp)?;
        for p in (0..n).filter(|&p| p != r) {
            let theirs = segments::chunk(&slice(p), chunk, k);
            // SAFETY: `p` wrote these bytes before the step just waited for and rewrites
            // buffer `b` only after this rank publishes its next step.
            let src = unsafe { g.buffer(p, b, 0..theirs.len() * size) };
            buf[theirs].copy_from_slice(bytemuck::cast_slice(src));
        }
    }
    Ok(())
}

/// Gathers every rank's `send` into every rank's `recv` through shared memory (rank `p`'s
/// block at `offsets[p]..offsets[p + 1]`; equal blocks for allgather, any sizes for
/// allgather_v). `kind` and `count` name the collective in the step fingerprints.
pub fn allgather_shm<T: Element>(
    g: &mut ShmGroup,
    seq: u64,
    send: &[T],
    recv: &mut [T],
    offsets: &[usize],
    kind: CollectiveKind,
) -> Result<Algorithm> {
    let (n, r) = (g.world_size(), g.rank());
    assert_eq!(offsets.len(), n + 1, "allgather_shm: one block per rank");
    recv[offsets[r]..offsets[r + 1]].copy_from_slice(send);
    if n == 1 || offsets[n] == 0 {
        return Ok(Algorithm::Local);
    }
    let fp = crate::fingerprint::fp::<T>(seq, kind, None, offsets[n], 0);
    // Decided on the total, which every rank knows, so that all take the same path.
    let total = offsets[n] * std::mem::size_of::<T>();
    if shm_single_copy(Op::Allgather, total, n, g.single_copy()) {
        g.expose(as_bytes(send));
        g.step_all(&fp)?;
        for p in (0..n).filter(|&p| p != r) {
            g.read_exposed(p, 0, as_bytes_mut(&mut recv[offsets[p]..offsets[p + 1]]))?;
        }
        // Peers keep `send` alive and unchanged until every rank has read it.
        g.step_all(&fp)?;
        return Ok(Algorithm::Shm);
    }
    allgather_slices(g, &fp, recv, &|p| offsets[p]..offsets[p + 1])?;
    Ok(Algorithm::Shm)
}

/// all_to_all of equal blocks through shared memory: per step every rank writes chunk `k` of
/// each of its blocks for the other `n - 1` ranks into its own buffer (the block for `p` at
/// slot `slot_of(self, p)`: no slot for itself, so each step moves `n/(n-1)` times more),
/// and reads chunk `k` of its own block from every peer's buffer.
pub fn all_to_all_shm<T: Element>(
    g: &mut ShmGroup,
    seq: u64,
    send: &[T],
    recv: &mut [T],
) -> Result<Algorithm> {
    let (n, r) = (g.world_size(), g.rank());
    assert_eq!(
        send.len(),
        recv.len(),
        "all_to_all_shm: equal send and recv"
    );
    assert_eq!(send.len() % n, 0, "all_to_all_shm: equal blocks");
    let per = send.len() / n;
    recv[r * per..(r + 1) * per].copy_from_slice(&send[r * per..(r + 1) * per]);
    if n == 1 || per == 0 {
        return Ok(Algorithm::Local);
    }
    // The same fingerprint as over TCP (counts per pair are checked by the frame there).
    let fp = crate::fingerprint::fp::<T>(seq, CollectiveKind::AllToAll, None, 0, 0);
    let size = std::mem::size_of::<T>();
    let block = |p: usize| p * per..(p + 1) * per;
    let equal = Op::AllToAll { equal: true };
    if shm_single_copy(equal, std::mem::size_of_val(send), n, g.single_copy()) {
        g.expose(as_bytes(send));
        g.step_all(&fp)?;
        for q in (0..n).filter(|&q| q != r) {
            // Rank q's block for this rank, straight from q's `send`.
            g.read_exposed(q, r * per * size, as_bytes_mut(&mut recv[block(q)]))?;
        }
        g.step_all(&fp)?;
        return Ok(Algorithm::Shm);
    }
    let slot = (g.buffer_bytes() / size / (n - 1)).max(1);
    for k in 0..segments::num_chunks(per, slot) {
        let b = g.next_buffer();
        for p in (0..n).filter(|&p| p != r) {
            let c = segments::chunk(&block(p), slot, k);
            let at = slot_of(r, p) * slot * size;
            // SAFETY: as in `allgather_slices`: peers finished reading buffer `b` before the
            // step this rank has passed (Note [Shared-memory protocol]).
            unsafe { g.own_buffer_mut(b, at..at + c.len() * size) }
                .copy_from_slice(bytemuck::cast_slice(&send[c]));
        }
        g.step_all(&fp)?;
        for q in (0..n).filter(|&q| q != r) {
            let c = segments::chunk(&block(q), slot, k);
            let at = slot_of(q, r) * slot * size;
            // SAFETY: `q` wrote these bytes before the step just waited for and rewrites
            // buffer `b` only after this rank publishes its next step.
            let src = unsafe { g.buffer(q, b, at..at + c.len() * size) };
            recv[c].copy_from_slice(bytemuck::cast_slice(src));
        }
    }
    Ok(Algorithm::Shm)
}

/// Where rank `from` puts its block for rank `to` (`to != from`) in its shared buffer: the
/// ranks other than `from`, in order.
fn slot_of(from: usize, to: usize) -> usize {
    if to < from {
        to
    } else {
        to - 1
    }
}
