//! reduce_scatter (equal blocks) and reduce_scatter_v (unequal blocks, MPI's Reduce_scatter):
//! block `p` of every rank's input, reduced, lands on rank `p`, folded in the canonical order
//! of that block (Note [Canonical reduction order]: `x[p+1] ⊕ … ⊕ x[p]`).
//!
//! Small inputs (`direct_max_bytes` in all): every rank sends each block to its owner in one
//! step and the owner folds what arrives (1 step; `(n-1)/n·S` sent per rank). Larger ones: the
//! ring's first half over the blocks (`n-1` steps; the same bytes, pipelined in chunks).
//!
//! Because the order of block `p` depends only on `p`, an allreduce of a buffer whose segments
//! are these blocks (`segments::segment`) gives bitwise the same values on their owners: the
//! sharded optimizers rely on it to be bitwise equal to DDP (Note [Shard layout] in
//! phalanx-ddp).

use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{CollectiveKind, Fingerprint, RecvReq, Result, SendReq, Transport};

use crate::{
    fingerprint::fp, kernels, options::chunk_elems, ring, segments, select, Algorithm, Op, Options,
    Placement, Plan,
};

/// Reduces `send` (world_size blocks) across ranks; rank `p` receives block `p` in `recv`.
pub fn reduce_scatter<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    send: &mut [T],
    recv: &mut [T],
    op: ReduceOp,
    opts: &Options,
) -> Result<Algorithm> {
    let n = t.world_size();
    let per = recv.len();
    assert_eq!(
        send.len(),
        per * n,
        "reduce_scatter: send must hold world_size × recv"
    );
    let offsets: Vec<usize> = (0..=n).map(|p| p * per).collect();
    let fp = fp::<T>(seq, CollectiveKind::ReduceScatter, Some(op), send.len(), 0);
    let algo = blocks(t, &fp, send, &offsets, op, opts)?;
    recv.copy_from_slice(&send[offsets[t.rank()]..offsets[t.rank() + 1]]);
    Ok(algo)
}

/// Reduces `send` across ranks, where block `p` holds `counts[p]` elements starting at
/// `counts[..p].sum()`; rank `p` receives block `p` in `recv` (`recv.len() == counts[rank]`).
/// Every rank passes the same `counts`.
pub fn reduce_scatter_v<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    send: &mut [T],
    recv: &mut [T],
    counts: &[usize],
    op: ReduceOp,
    opts: &Options,
) -> Result<Algorithm> {
    let (n, r) = (t.world_size(), t.rank());
    assert_eq!(counts.len(), n, "reduce_scatter_v: one count per rank");
    let offsets = segments::block_offsets(counts);
    assert_eq!(
        send.len(),
        offsets[n],
        "reduce_scatter_v: send must hold the sum of counts"
    );
    assert_eq!(
        recv.len(),
        counts[r],
        "reduce_scatter_v: recv must hold counts[rank]"
    );
    let algo = reduce_scatter_v_in_place(t, seq, send, counts, op, opts)?;
    recv.copy_from_slice(&send[offsets[r]..offsets[r + 1]]);
    Ok(algo)
}

/// [`reduce_scatter_v`] in place: afterwards this rank's block of `buf` holds its result; the
/// other blocks hold partial results or the input (unspecified).
pub fn reduce_scatter_v_in_place<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    buf: &mut [T],
    counts: &[usize],
    op: ReduceOp,
    opts: &Options,
) -> Result<Algorithm> {
    let n = t.world_size();
    assert_eq!(counts.len(), n, "reduce_scatter_v: one count per rank");
    let offsets = segments::block_offsets(counts);
    assert_eq!(
        buf.len(),
        offsets[n],
        "reduce_scatter_v: the buffer must hold the sum of counts"
    );
    let fp = fp::<T>(seq, CollectiveKind::ReduceScatterV, Some(op), buf.len(), 0);
    blocks(t, &fp, buf, &offsets, op, opts)
}

/// Leaves this rank's reduced block (finished for `Avg`) in place in `buf`.
fn blocks<T: Element>(
    t: &mut dyn Transport,
    fp: &Fingerprint,
    buf: &mut [T],
    offsets: &[usize],
    op: ReduceOp,
    opts: &Options,
) -> Result<Algorithm> {
    let (n, r) = (t.world_size(), t.rank());
    let block = |p: usize| offsets[p]..offsets[p + 1];
    let bytes = std::mem::size_of_val(buf);
    let algo = match select(Op::ReduceScatter, bytes, n, Placement::Tcp, opts) {
        Plan::Local => Algorithm::Local,
        Plan::Direct => {
            direct(t, fp, buf, offsets, op)?;
            Algorithm::Direct
        }
        _ => {
            ring::reduce_scatter(
                t,
                fp,
                &ring::everyone(n),
                buf,
                &block,
                op,
                chunk_elems::<T>(opts),
            )?;
            Algorithm::Ring
        }
    };
    kernels::finish(op, &mut buf[block(r)], n);
    Ok(algo)
}

/// One step: block `p` to rank `p`; this rank folds the `n - 1` copies of its block that
/// arrive, then its own, in the canonical order, into its block of `buf` (not yet divided
/// for `Avg`).
fn direct<T: Element>(
    t: &mut dyn Transport,
    fp: &Fingerprint,
    buf: &mut [T],
    offsets: &[usize],
    op: ReduceOp,
) -> Result<()> {
    let (n, r) = (t.world_size(), t.rank());
    let block = |p: usize| offsets[p]..offsets[p + 1];
    let mine = block(r).len();
    let mut theirs: Vec<Vec<T>> = (0..n)
        .map(|p| match p != r && mine > 0 {
            true => vec![T::zeroed(); mine],
            false => Vec::new(),
        })
        .collect();
    {
        let sends: Vec<SendReq<'_>> = (0..n)
            .filter(|&p| p != r && !block(p).is_empty())
            .map(|peer| SendReq {
                peer,
                data: bytemuck::cast_slice(&buf[block(peer)]),
            })
            .collect();
        let mut recvs: Vec<RecvReq<'_>> = theirs
            .iter_mut()
            .enumerate()
            .filter(|(p, v)| *p != r && !v.is_empty())
            .map(|(peer, v)| RecvReq {
                peer,
                buf: bytemuck::cast_slice_mut(&mut v[..]),
            })
            .collect();
        t.exchange(fp, &sends, &mut recvs)?;
    }
    if mine == 0 {
        return Ok(());
    }
    // The others in canonical order, then this rank's values, already in place, last.
    let mut order = segments::canonical_order(n, r).take(n - 1);
    let mut acc = std::mem::take(&mut theirs[order.next().expect("world >= 2")]);
    for p in order {
        kernels::reduce_into(op, &mut acc, &theirs[p]);
    }
    kernels::reduce_last(op, &mut buf[block(r)], &acc);
    Ok(())
}
