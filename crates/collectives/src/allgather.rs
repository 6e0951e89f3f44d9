//! allgather (equal blocks) and allgather_v (unequal blocks, MPI's Allgatherv): the ring.

use phalanx_core::Element;
use phalanx_transport::{CollectiveKind, Result, Transport};

use crate::{fingerprint::fp, options::chunk_elems, ring, segments, Algorithm, Options};

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

/// Gathers every rank's `send` into `recv`, where rank `p` contributes `counts[p]` elements
/// (MPI's Allgatherv; PyTorch's `all_gather` with tensors of different sizes): rank `p`'s
/// block starts at `counts[..p].sum()`. `send.len()` must be `counts[rank]` and `recv.len()`
/// their sum; every rank passes the same `counts`.
pub fn allgather_v<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    opts: &Options,
) -> Result<Algorithm> {
    let (n, r) = (t.world_size(), t.rank());
    assert_eq!(counts.len(), n, "allgather_v: one count per rank");
    assert_eq!(
        send.len(),
        counts[r],
        "allgather_v: send must hold counts[rank]"
    );
    let offsets = segments::block_offsets(counts);
    assert_eq!(
        recv.len(),
        offsets[n],
        "allgather_v: recv must hold the sum of counts"
    );
    recv[offsets[r]..offsets[r + 1]].copy_from_slice(send);
    if n == 1 || offsets[n] == 0 {
        return Ok(Algorithm::Local);
    }
    let fp = fp::<T>(seq, CollectiveKind::AllgatherV, None, offsets[n], 0);
    ring::allgather(
        t,
        &fp,
        &ring::everyone(n),
        recv,
        &|s| offsets[s]..offsets[s + 1],
        chunk_elems::<T>(opts),
    )?;
    Ok(Algorithm::Ring)
}
