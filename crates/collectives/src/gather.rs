//! gather and scatter: one step between the root and every other rank.

use phalanx_core::Element;
use phalanx_transport::{CollectiveKind, RecvReq, Result, SendReq, Transport};

use crate::{fingerprint::fp, Algorithm};

/// Gathers every rank's `send` into `root`'s `recv` (rank `p`'s block at `p * send.len()`).
/// `recv` is only read on the root, where it must hold `world_size × send.len()` elements.
pub fn gather<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    send: &[T],
    recv: &mut [T],
    root: usize,
) -> Result<Algorithm> {
    let (n, r) = (t.world_size(), t.rank());
    let per = send.len();
    let fp = fp::<T>(seq, CollectiveKind::Gather, None, per, root);
    if r != root {
        if n > 1 && per > 0 {
            t.send(&fp, root, bytemuck::cast_slice(send))?;
            return Ok(Algorithm::Direct);
        }
        return Ok(Algorithm::Local);
    }
    assert_eq!(
        recv.len(),
        per * n,
        "gather: the root's recv must hold world_size × send"
    );
    recv[r * per..(r + 1) * per].copy_from_slice(send);
    if n == 1 || per == 0 {
        return Ok(Algorithm::Local);
    }
    let mut recvs: Vec<RecvReq<'_>> = recv
        .chunks_mut(per)
        .enumerate()
        .filter(|(p, _)| *p != r)
        .map(|(peer, b)| RecvReq {
            peer,
            buf: bytemuck::cast_slice_mut(b),
        })
        .collect();
    t.exchange(&fp, &[], &mut recvs)?;
    Ok(Algorithm::Direct)
}

/// Hands block `p` of `root`'s `send` (`world_size` blocks of `recv.len()`) to rank `p`'s
/// `recv`. `send` is only read on the root.
pub fn scatter<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    send: &[T],
    recv: &mut [T],
    root: usize,
) -> Result<Algorithm> {
    let (n, r) = (t.world_size(), t.rank());
    let per = recv.len();
    let fp = fp::<T>(seq, CollectiveKind::Scatter, None, per, root);
    if r != root {
        if n > 1 && per > 0 {
            t.recv(&fp, root, bytemuck::cast_slice_mut(recv))?;
            return Ok(Algorithm::Direct);
        }
        return Ok(Algorithm::Local);
    }
    assert_eq!(
        send.len(),
        per * n,
        "scatter: the root's send must hold world_size × recv"
    );
    recv.copy_from_slice(&send[r * per..(r + 1) * per]);
    if n == 1 || per == 0 {
        return Ok(Algorithm::Local);
    }
    let sends: Vec<SendReq<'_>> = send
        .chunks(per)
        .enumerate()
        .filter(|(p, _)| *p != r)
        .map(|(peer, b)| SendReq {
            peer,
            data: bytemuck::cast_slice(b),
        })
        .collect();
    t.exchange(&fp, &sends, &mut [])?;
    Ok(Algorithm::Direct)
}
