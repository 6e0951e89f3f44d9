//! barrier: dissemination, ⌈log2 n⌉ rounds of empty frames.

use phalanx_transport::{CollectiveKind, RecvReq, Result, SendReq, Transport};

use crate::{fingerprint::fp, Algorithm};

/// Returns once every rank has entered the barrier.
pub fn barrier(t: &mut dyn Transport, seq: u64) -> Result<Algorithm> {
    let (n, r) = (t.world_size(), t.rank());
    if n == 1 {
        return Ok(Algorithm::Local);
    }
    let fp = fp::<u8>(seq, CollectiveKind::Barrier, None, 0, 0);
    let mut dist = 1;
    while dist < n {
        let to = (r + dist) % n;
        let from = (r + n - dist) % n;
        t.exchange(
            &fp,
            &[SendReq {
                peer: to,
                data: &[],
            }],
            &mut [RecvReq {
                peer: from,
                buf: &mut [],
            }],
        )?;
        dist *= 2;
    }
    Ok(Algorithm::Dissemination)
}
