//! Allreduce over a [`ShmGroup`]: the ranks of one host read each other's buffers directly
//! instead of sending bytes.
//!
//! | size | algorithm | steps | bytes copied per rank |
//! |---|---|---|---|
//! | ≤ `small_max_bytes` | every rank reduces the whole buffer from all segments | 1 | S in, reads n·S |
//! | larger | pieces: rank r reduces piece r of each chunk in place, all copy results out | 2 per chunk | (n-1)/n·S in, S/n out, (n-1)/n·S back |
//!
//! Large buffers go in chunks of the segment's buffer size; chunk `k` holds, for every
//! segment `s` of Note [Canonical reduction order], the `k`-th piece of `s`, at byte
//! `s · piece` of the buffer. Per chunk:
//! 1. each rank copies the pieces of the *other* ranks' segments into its buffer and
//!    publishes (a barrier: every use of a buffer starts with one, see Note [Shared-memory
//!    protocol] in `phalanx_transport::shm`);
//! 2. rank `r` folds piece `r` of every peer's buffer in the canonical order of segment `r`,
//!    which ends with `r` itself, so its own values come straight from the caller's buffer
//!    and the result lands there (divided for `Avg`); it copies the result into piece `r` of
//!    its own buffer (which no peer reads yet) and publishes;
//! 3. as each peer `p`'s second step arrives, rank `r` copies piece `p` of `p`'s buffer out.
//!
//! Chunks alternate between the two buffers, so step 1 of chunk `k+1` overlaps nobody's
//! reads of chunk `k`. A chunk's working set (one buffer per rank plus the caller's chunk)
//! stays in cache, so the caller's buffer crosses the memory bus once each way.

use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{shm::ShmGroup, CollectiveKind, Fingerprint, Result};

use super::bytes::{as_bytes, byte_range};
use crate::{
    fingerprint::fp,
    kernels::{finish, reduce2, reduce_into, reduce_last},
    segments, Algorithm,
};

/// Buffers up to this many bytes take the one-step path (measured: see docs/shm.md).
pub const SHM_SMALL_MAX_BYTES: usize = 32 * 1024;

/// Bytes of a large allreduce's chunk (all ranks' pieces together) for `world` ranks when
/// [`ShmOptions::chunk_bytes`] is `None`: every rank's chunk-sized buffer and the caller's
/// chunk must stay in the shared L3 together. Measured with 4 ranks on 2 cores, 16 MiB:
/// 2 MiB chunks 2.0 GB/s bus bandwidth, 1 MiB 3.5, 512 KiB 3.5; with 2 ranks 2 MiB is best.
pub fn auto_chunk_bytes(world: usize) -> usize {
    (4 << 20) / world.max(1)
}

/// Tuning of the shared-memory algorithms; must be equal on every rank.
#[derive(Debug, Clone)]
pub struct ShmOptions {
    /// Buffers up to this size (bytes, and at most the segment's buffer size) are reduced
    /// in one step by every rank; larger ones in pieces.
    pub small_max_bytes: usize,
    /// Chunk of the pieces algorithm in bytes (at most the segment's buffer size);
    /// `None`: [`auto_chunk_bytes`].
    pub chunk_bytes: Option<usize>,
}

impl Default for ShmOptions {
    fn default() -> Self {
        ShmOptions {
            small_max_bytes: SHM_SMALL_MAX_BYTES,
            chunk_bytes: None,
        }
    }
}

/// Reduces `buf` across the ranks of `g` in place, bitwise identical to
/// [`crate::allreduce`] over any transport.
pub fn allreduce_shm<T: Element>(
    g: &mut ShmGroup,
    seq: u64,
    buf: &mut [T],
    op: ReduceOp,
) -> Result<Algorithm> {
    allreduce_shm_with(g, seq, buf, op, &ShmOptions::default())
}

/// [`allreduce_shm`] with explicit options.
pub fn allreduce_shm_with<T: Element>(
    g: &mut ShmGroup,
    seq: u64,
    buf: &mut [T],
    op: ReduceOp,
    opts: &ShmOptions,
) -> Result<Algorithm> {
    reduce_all(g, seq, buf, op, opts, CollectiveKind::Allreduce)
}

fn reduce_all<T: Element>(
    g: &mut ShmGroup,
    seq: u64,
    buf: &mut [T],
    op: ReduceOp,
    opts: &ShmOptions,
    kind: CollectiveKind,
) -> Result<Algorithm> {
    let n = g.world_size();
    if n == 1 || buf.is_empty() {
        return Ok(Algorithm::Local);
    }
    let fp = fp::<T>(seq, kind, Some(op), buf.len(), 0);
    if std::mem::size_of_val(buf) <= opts.small_max_bytes.min(g.buffer_bytes()) {
        small(g, &fp, buf, op)?;
    } else {
        let chunk = opts.chunk_bytes.unwrap_or_else(|| auto_chunk_bytes(n));
        pieces(g, &fp, buf, op, chunk.min(g.buffer_bytes()))?;
    }
    Ok(Algorithm::Shm)
}

/// One step: everyone publishes the whole buffer, everyone reduces all of it.
fn small<T: Element>(
    g: &mut ShmGroup,
    fp: &Fingerprint,
    buf: &mut [T],
    op: ReduceOp,
) -> Result<()> {
    let n = g.world_size();
    let bytes = std::mem::size_of_val(buf);
    let b = g.next_buffer();
    // SAFETY: peers last read buffer `b` in the use before the previous one, and finished
    // before the barrier of the previous use, which this rank has passed.
    unsafe { g.own_buffer_mut(b, 0..bytes) }.copy_from_slice(as_bytes(buf));
    g.step_all(fp)?;
    let count = buf.len();
    // SAFETY: every rank wrote its buffer `b` before the step just waited for and rewrites
    // it only after this rank publishes its next step.
    let srcs: Vec<&[T]> = (0..n)
        .map(|p| bytemuck::cast_slice(unsafe { g.buffer(p, b, 0..bytes) }))
        .collect();
    for s in 0..n {
        let seg = segments::segment(count, n, s);
        if seg.is_empty() {
            continue;
        }
        let mut order = segments::canonical_order(n, s).map(|p| &srcs[p][seg.clone()]);
        let first = order.next().expect("world >= 2");
        let second = order.next().expect("world >= 2");
        reduce2(op, &mut buf[seg.clone()], first, second);
        for src in order {
            reduce_into(op, &mut buf[seg.clone()], src);
        }
    }
    finish(op, buf, n);
    Ok(())
}

/// The chunked, piece-wise algorithm of the module docs.
fn pieces<T: Element>(
    g: &mut ShmGroup,
    fp: &Fingerprint,
    buf: &mut [T],
    op: ReduceOp,
    chunk_bytes: usize,
) -> Result<()> {
    let (n, r) = (g.world_size(), g.rank());
    let sz = std::mem::size_of::<T>();
    // Pieces start on cache lines so that ranks' writes never share one.
    let piece_bytes = chunk_bytes / n;
    let piece = if piece_bytes >= 64 {
        (piece_bytes & !63) / sz
    } else {
        piece_bytes / sz
    };
    assert!(
        piece > 0,
        "shared-memory chunks of {chunk_bytes} bytes are too small for {n} ranks"
    );
    let count = buf.len();
    let segs: Vec<_> = (0..n).map(|s| segments::segment(count, n, s)).collect();
    let mut tmp: Vec<T> = Vec::new();
    // Segment 0 is the longest.
    for k in 0..segments::num_chunks(segs[0].len(), piece) {
        let b = g.next_buffer();
        let part = |s: usize| segments::chunk(&segs[s], piece, k);
        let slot = |s: usize, len: usize| byte_range::<T>(s * piece, len);
        for (s, _) in segs.iter().enumerate().filter(|(s, _)| *s != r) {
            let p = part(s);
            // SAFETY: as in `small`: peers finished with this buffer's previous use.
            unsafe { g.own_buffer_mut(b, slot(s, p.len())) }.copy_from_slice(as_bytes(&buf[p]));
        }
        g.step_all(fp)?;
        let mine = part(r);
        if !mine.is_empty() {
            let len = mine.len();
            {
                // SAFETY: peers wrote piece `r` of buffer `b` before the step just waited for
                // and leave it alone until this rank's next-but-one step.
                let others: Vec<&[T]> = segments::canonical_order(n, r)
                    .take(n - 1)
                    .map(|p| bytemuck::cast_slice(unsafe { g.buffer(p, b, slot(r, len)) }))
                    .collect();
                fold_own_last(op, &mut buf[mine.clone()], &others, &mut tmp);
            }
            finish(op, &mut buf[mine.clone()], n);
            // SAFETY: no peer reads piece `r` of this rank's buffer before the step below.
            unsafe { g.own_buffer_mut(b, slot(r, len)) }.copy_from_slice(as_bytes(&buf[mine]));
        }
        g.publish(fp)?;
        for s in (1..n).map(|d| (r + d) % n) {
            g.wait_for(s, fp)?;
            let p = part(s);
            let len = p.len();
            // SAFETY: rank `s` wrote its result piece before the step just waited for and
            // rewrites buffer `b` only after this rank's next step.
            let src = unsafe { g.buffer(s, b, slot(s, len)) };
            buf[p].copy_from_slice(bytemuck::cast_slice(src));
        }
    }
    Ok(())
}

/// Folds `others` (in canonical order) then this rank's values, already in `dst`, into
/// `dst`. With more than one peer the partial fold goes through `tmp` in L1-sized blocks.
pub(super) fn fold_own_last<T: Element>(
    op: ReduceOp,
    dst: &mut [T],
    others: &[&[T]],
    tmp: &mut Vec<T>,
) {
    if let [only] = others {
        reduce_last(op, dst, only);
        return;
    }
    const BLOCK_BYTES: usize = 16 * 1024;
    let block = (BLOCK_BYTES / std::mem::size_of::<T>()).max(1);
    tmp.resize(block.min(dst.len()), T::zeroed());
    let mut at = 0;
    while at < dst.len() {
        let end = (at + block).min(dst.len());
        let acc = &mut tmp[..end - at];
        reduce2(op, acc, &others[0][at..end], &others[1][at..end]);
        for src in &others[2..] {
            reduce_into(op, acc, &src[at..end]);
        }
        reduce_last(op, &mut dst[at..end], acc);
        at = end;
    }
}
