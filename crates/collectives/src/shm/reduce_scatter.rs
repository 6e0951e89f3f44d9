//! reduce_scatter and reduce_scatter_v among the ranks of one host: every rank publishes the
//! parts of its input that the others own, and each rank folds its own block from every
//! peer's shared buffer.
//!
//! | steps | bytes copied per rank |
//! |---|---|
//! | 1 per chunk | (n-1)/n·S into its buffer, (n-1)/n·S read from the peers', S/n its own |
//!
//! Large inputs go in chunks: chunk `k` holds, for every block `s` other than the rank's own,
//! the `k`-th piece of block `s` at byte `s · piece` of the rank's buffer. Per chunk each rank
//! copies those pieces in and publishes (a barrier step, Note [Shared-memory protocol] in
//! `phalanx_transport::shm`), then folds piece `k` of its own block from every peer's buffer
//! in the canonical order of that block (Note [Canonical reduction order]), which ends with
//! its own values, read straight from its input. Chunks alternate between the two buffers,
//! so the copies of chunk `k+1` overlap nobody's reads of chunk `k`. One step per chunk where
//! the allreduce it replaced (an allreduce of the whole input, then the own block) took two
//! and copied every result back to every rank.

use std::ops::Range;

use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{shm::ShmGroup, CollectiveKind, Result};

use super::allreduce::{auto_chunk_bytes, fold_own_last};
use super::bytes::{as_bytes, byte_range};
use crate::{fingerprint::fp, kernels::finish, segments, Algorithm};

/// reduce_scatter among ranks that all share memory: rank `p` receives block `p` of the
/// reduction of every rank's `send`, where block `p` is `offsets[p]..offsets[p + 1]` (equal
/// blocks for reduce_scatter, any sizes for reduce_scatter_v; every rank passes the same
/// `offsets`). `kind` names the collective in the step fingerprints. Bitwise the TCP
/// algorithms' result.
pub fn reduce_scatter_shm<T: Element>(
    g: &mut ShmGroup,
    seq: u64,
    send: &[T],
    recv: &mut [T],
    offsets: &[usize],
    op: ReduceOp,
    kind: CollectiveKind,
) -> Result<Algorithm> {
    let (n, r) = (g.world_size(), g.rank());
    assert_eq!(
        offsets.len(),
        n + 1,
        "reduce_scatter_shm: one block per rank"
    );
    assert_eq!(
        send.len(),
        offsets[n],
        "reduce_scatter_shm: send holds every block"
    );
    let block = |p: usize| -> Range<usize> { offsets[p]..offsets[p + 1] };
    assert_eq!(
        recv.len(),
        block(r).len(),
        "reduce_scatter_shm: recv holds this rank's block"
    );
    // Its own values come last in its block's order: they start the result.
    recv.copy_from_slice(&send[block(r)]);
    if n == 1 || offsets[n] == 0 {
        return Ok(Algorithm::Local);
    }
    let fp = fp::<T>(seq, kind, Some(op), offsets[n], 0);
    let sz = std::mem::size_of::<T>();
    let chunk_bytes = auto_chunk_bytes(n).min(g.buffer_bytes());
    // Pieces start on cache lines so that ranks' writes never share one.
    let piece_bytes = chunk_bytes / n;
    let piece = match piece_bytes >= 64 {
        true => (piece_bytes & !63) / sz,
        false => piece_bytes / sz,
    }
    .max(1);
    let chunks = (0..n)
        .map(|p| segments::num_chunks(block(p).len(), piece))
        .max()
        .unwrap_or(0);
    let slot = |s: usize, len: usize| byte_range::<T>(s * piece, len);
    let mut tmp: Vec<T> = Vec::new();
    for k in 0..chunks {
        let b = g.next_buffer();
        for s in (0..n).filter(|&s| s != r) {
            let part = segments::chunk(&block(s), piece, k);
            // SAFETY: peers last read buffer `b` in the use before the previous one and
            // finished before that use's step, which this rank has passed (Note
            // [Shared-memory protocol]).
            unsafe { g.own_buffer_mut(b, slot(s, part.len())) }
                .copy_from_slice(as_bytes(&send[part]));
        }
        g.step_all(&fp)?;
        let mine = segments::chunk(&block(r), piece, k);
        if mine.is_empty() {
            continue;
        }
        let len = mine.len();
        let local = mine.start - offsets[r]..mine.end - offsets[r];
        // SAFETY: every peer wrote piece `r` of buffer `b` before the step just waited for
        // and rewrites that buffer only after this rank publishes its next step.
        let others: Vec<&[T]> = segments::canonical_order(n, r)
            .take(n - 1)
            .map(|p| bytemuck::cast_slice(unsafe { g.buffer(p, b, slot(r, len)) }))
            .collect();
        fold_own_last(op, &mut recv[local], &others, &mut tmp);
    }
    finish(op, recv, n);
    Ok(Algorithm::Shm)
}

/// [`reduce_scatter_shm`] in place: afterwards this rank's block of `buf` holds its result;
/// the other blocks are left as they were.
pub fn reduce_scatter_shm_in_place<T: Element>(
    g: &mut ShmGroup,
    seq: u64,
    buf: &mut [T],
    offsets: &[usize],
    op: ReduceOp,
    kind: CollectiveKind,
) -> Result<Algorithm> {
    let mine = offsets[g.rank()]..offsets[g.rank() + 1];
    // The fold reads the other blocks while it writes this one: through a copy of the block.
    let mut out = buf[mine.clone()].to_vec();
    let algo = reduce_scatter_shm(g, seq, buf, &mut out, offsets, op, kind)?;
    buf[mine].copy_from_slice(&out);
    Ok(algo)
}
