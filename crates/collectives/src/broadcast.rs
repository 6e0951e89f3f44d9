//! broadcast: the root sends to all for small buffers; scatter then ring allgather for large
//! ones.

use phalanx_core::Element;
use phalanx_transport::{CollectiveKind, Result, SendReq, Transport};

use crate::{
    fingerprint::fp, options::chunk_elems, ring, segments, select, Algorithm, Op, Options,
    Placement, Plan,
};

/// Copies `root`'s `buf` to every rank.
pub fn broadcast<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    buf: &mut [T],
    root: usize,
    opts: &Options,
) -> Result<Algorithm> {
    let (n, r) = (t.world_size(), t.rank());
    let fp = fp::<T>(seq, CollectiveKind::Broadcast, None, buf.len(), root);
    if n == 1 || buf.is_empty() {
        return Ok(Algorithm::Local);
    }
    if select(
        Op::Broadcast,
        std::mem::size_of_val(buf),
        n,
        Placement::Tcp,
        opts,
    ) == Plan::Direct
    {
        if r == root {
            let data: &[u8] = bytemuck::cast_slice(buf);
            let sends: Vec<_> = (0..n)
                .filter(|&p| p != r)
                .map(|peer| SendReq { peer, data })
                .collect();
            t.exchange(&fp, &sends, &mut [])?;
        } else {
            t.recv(&fp, root, bytemuck::cast_slice_mut(buf))?;
        }
        return Ok(Algorithm::Direct);
    }
    // Scatter: the root hands segment p to rank p (segments relative to the root so that the
    // root keeps its own), then a ring allgather completes every rank.
    let count = buf.len();
    let segs = move |s| segments::segment(count, n, (s + n - root) % n);
    if r == root {
        let bytes: Vec<(usize, std::ops::Range<usize>)> = (0..n)
            .filter(|&p| p != r)
            .map(|p| (p, segs(p)))
            .filter(|(_, s)| !s.is_empty())
            .collect();
        let sends: Vec<_> = bytes
            .iter()
            .map(|(peer, s)| SendReq {
                peer: *peer,
                data: bytemuck::cast_slice(&buf[s.clone()]),
            })
            .collect();
        t.exchange(&fp, &sends, &mut [])?;
    } else {
        let mine = segs(r);
        if !mine.is_empty() {
            t.recv(&fp, root, bytemuck::cast_slice_mut(&mut buf[mine]))?;
        }
    }
    ring::allgather(
        t,
        &fp,
        &ring::everyone(n),
        buf,
        &segs,
        chunk_elems::<T>(opts),
    )?;
    Ok(Algorithm::Ring)
}
