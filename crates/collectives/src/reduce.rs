//! reduce: the result of an allreduce, on the root only.
//!
//! Small buffers: every other rank sends its whole buffer to the root, which folds them in the
//! canonical order (1 step; the root receives `(n-1)·S`). Large buffers: the ring's
//! reduce-scatter, then each rank sends its reduced segment to the root (`n` steps; each rank
//! sends `(n-1)/n·S + S/n`). Both fold in Note [Canonical reduction order], so the root's
//! result is bitwise the allreduce's. Other ranks' buffers are left as they were (small) or
//! hold partial sums (large), as PyTorch leaves them unspecified.

use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{CollectiveKind, RecvReq, Result, SendReq, Transport};

use crate::{
    direct, fingerprint::fp, kernels, options::chunk_elems, ring, segments, select, Algorithm, Op,
    Options, Placement, Plan,
};

/// Reduces `buf` across ranks into `root`'s `buf`.
pub fn reduce<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    buf: &mut [T],
    op: ReduceOp,
    root: usize,
    opts: &Options,
) -> Result<Algorithm> {
    let (n, r) = (t.world_size(), t.rank());
    let fp = fp::<T>(seq, CollectiveKind::Reduce, Some(op), buf.len(), root);
    if n == 1 || buf.is_empty() {
        kernels::finish(op, buf, n);
        return Ok(Algorithm::Local);
    }
    let count = buf.len();
    if select(
        Op::Reduce,
        std::mem::size_of_val(buf),
        n,
        Placement::Tcp,
        opts,
    ) == Plan::Direct
    {
        if r != root {
            t.send(&fp, root, bytemuck::cast_slice(buf))?;
            return Ok(Algorithm::Direct);
        }
        let theirs = direct::receive_all::<T>(t, &fp, count, &[])?;
        let out = direct::fold_canonical(buf, &theirs, r, op);
        buf.copy_from_slice(&out);
        kernels::finish(op, buf, n);
        return Ok(Algorithm::Direct);
    }
    let segs = move |s| segments::segment(count, n, s);
    let all = ring::everyone(n);
    ring::reduce_scatter(t, &fp, &all, buf, &segs, op, chunk_elems::<T>(opts))?;
    if r == root {
        let mut recvs: Vec<RecvReq<'_>> = Vec::with_capacity(n - 1);
        let mut rest: &mut [T] = buf;
        let mut at = 0;
        for p in 0..n {
            let seg = segs(p);
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(seg.start - at);
            let (mine, tail) = tail.split_at_mut(seg.len());
            rest = tail;
            at = seg.end;
            if p != r && !mine.is_empty() {
                recvs.push(RecvReq {
                    peer: p,
                    buf: bytemuck::cast_slice_mut(mine),
                });
            }
        }
        t.exchange(&fp, &[], &mut recvs)?;
        kernels::finish(op, buf, n);
    } else {
        let mine = segs(r);
        if !mine.is_empty() {
            let sends = [SendReq {
                peer: root,
                data: bytemuck::cast_slice(&buf[mine]),
            }];
            t.exchange(&fp, &sends, &mut [])?;
        }
    }
    Ok(Algorithm::Ring)
}
