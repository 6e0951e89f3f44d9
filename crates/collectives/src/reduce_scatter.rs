//! reduce_scatter: the ring's first half, in the canonical reduction order.

use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{CollectiveKind, Result, Transport};

use crate::{chunk_elems, fp, kernels, ring, Algorithm, Options};

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
    kernels::finish(op, recv, n);
    Ok(algo)
}
