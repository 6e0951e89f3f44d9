//! Direct exchange: every rank sends its whole buffer to every other rank in one step, then
//! reduces locally in the canonical order.
//!
//! Communication steps: 1. Bytes on the wire per rank: `(world - 1) × size`. This is the
//! latency optimum for small buffers, where one round trip costs more than the bytes.

use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{Fingerprint, RecvReq, Result, SendReq, Transport};

use crate::{kernels::reduce_into, segments};

/// Allreduce by direct exchange; `buf` holds the reduced result afterwards (not yet divided
/// for `Avg`).
pub(crate) fn allreduce<T: Element>(
    t: &mut dyn Transport,
    fp: &Fingerprint,
    buf: &mut [T],
    op: ReduceOp,
) -> Result<()> {
    let (n, r) = (t.world_size(), t.rank());
    let theirs = {
        let bytes: &[u8] = bytemuck::cast_slice(buf);
        let sends: Vec<SendReq<'_>> = (0..n)
            .filter(|&p| p != r)
            .map(|peer| SendReq { peer, data: bytes })
            .collect();
        receive_all::<T>(t, fp, buf.len(), &sends)?
    };
    let out = fold_canonical(buf, &theirs, r, op);
    buf.copy_from_slice(&out);
    Ok(())
}

/// Sends `sends` while receiving `count` elements from every other rank, in one step;
/// `theirs[p]` is rank `p`'s buffer (empty for this rank).
pub(crate) fn receive_all<T: Element>(
    t: &mut dyn Transport,
    fp: &Fingerprint,
    count: usize,
    sends: &[SendReq<'_>],
) -> Result<Vec<Vec<T>>> {
    let (n, r) = (t.world_size(), t.rank());
    let mut theirs: Vec<Vec<T>> = (0..n)
        .map(|p| {
            if p == r {
                Vec::new()
            } else {
                vec![T::zeroed(); count]
            }
        })
        .collect();
    let mut recvs: Vec<RecvReq<'_>> = theirs
        .iter_mut()
        .enumerate()
        .filter(|(p, _)| *p != r)
        .map(|(peer, v)| RecvReq {
            peer,
            buf: bytemuck::cast_slice_mut(&mut v[..]),
        })
        .collect();
    t.exchange(fp, sends, &mut recvs)?;
    drop(recvs);
    Ok(theirs)
}

/// Every rank's buffer folded in the canonical order (Note [Canonical reduction order]):
/// `mine` is this rank's (rank `me`), `theirs[p]` rank `p`'s (`theirs[me]` is unused).
pub(crate) fn fold_canonical<T: Element>(
    mine: &[T],
    theirs: &[Vec<T>],
    me: usize,
    op: ReduceOp,
) -> Vec<T> {
    let (n, count) = (theirs.len(), mine.len());
    let mut out = vec![T::zeroed(); count];
    for s in 0..n {
        let seg = segments::segment(count, n, s);
        let mut order = segments::canonical_order(n, s);
        let first = order.next().expect("world >= 1");
        let src = |p: usize| -> &[T] {
            if p == me {
                &mine[seg.clone()]
            } else {
                &theirs[p][seg.clone()]
            }
        };
        out[seg.clone()].copy_from_slice(src(first));
        for p in order {
            reduce_into(op, &mut out[seg.clone()], src(p));
        }
    }
    out
}
