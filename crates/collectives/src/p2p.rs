//! Point-to-point messages: `send`/`recv` and batches of them.
//!
//! Each pair of ranks numbers its messages itself (the caller keeps one sequence per peer and
//! direction), apart from the group's collective sequence, so send/recv among some ranks
//! interleaves with collectives of all (Note [Early frames] in `phalanx-transport`). The tag
//! travels in the fingerprint: a receive must name the tag, element type and count of the
//! send it matches, or both sides fail naming the two calls.

use phalanx_core::Element;
use phalanx_transport::{CollectiveKind, Fingerprint, RecvReq, Result, SendReq, Transport};

/// The fingerprint of the `seq`-th message of a pair: `count` elements of `T`, `tag`.
pub fn p2p_fingerprint<T: Element>(seq: u64, count: usize, tag: u32) -> Fingerprint {
    crate::fingerprint::fp::<T>(seq, CollectiveKind::SendRecv, None, count, tag as usize)
}

/// Sends `buf` to `peer` as the pair's `seq`-th message; matched by a [`recv`] with the same
/// `tag` there.
pub fn send<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    buf: &[T],
    peer: usize,
    tag: u32,
) -> Result<()> {
    let fp = p2p_fingerprint::<T>(seq, buf.len(), tag);
    t.send(&fp, peer, bytemuck::cast_slice(buf))
}

/// Receives the pair's `seq`-th message from `peer` into `buf`.
pub fn recv<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    buf: &mut [T],
    peer: usize,
    tag: u32,
) -> Result<()> {
    let fp = p2p_fingerprint::<T>(seq, buf.len(), tag);
    t.recv(&fp, peer, bytemuck::cast_slice_mut(buf))
}

/// One send of a batch.
#[derive(Debug)]
pub struct P2pSend<'a, T> {
    /// Destination rank.
    pub peer: usize,
    /// The pair's sequence number of this message.
    pub seq: u64,
    /// Tag the receive must name.
    pub tag: u32,
    /// What to send.
    pub buf: &'a [T],
}

/// One receive of a batch.
#[derive(Debug)]
pub struct P2pRecv<'a, T> {
    /// Source rank.
    pub peer: usize,
    /// The pair's sequence number of this message.
    pub seq: u64,
    /// Tag the send must name.
    pub tag: u32,
    /// Where the message goes; its length is the count expected.
    pub buf: &'a mut [T],
}

/// Moves every send and receive concurrently (`batch_isend_irecv`): two ranks that send each
/// other large messages never wait on each other's full socket buffers. At most one send to
/// and one receive from each peer at a time; a batch with several messages for one peer moves
/// them in order, one step each.
pub fn send_recv_batch<T: Element>(
    t: &mut dyn Transport,
    sends: &[P2pSend<'_, T>],
    recvs: &mut [P2pRecv<'_, T>],
) -> Result<()> {
    // Step k carries the k-th send to and the k-th receive from each peer.
    let mut send_step = vec![0usize; sends.len()];
    let mut recv_step = vec![0usize; recvs.len()];
    let mut per_peer = std::collections::HashMap::<(usize, bool), usize>::new();
    for (i, s) in sends.iter().enumerate() {
        let n = per_peer.entry((s.peer, true)).or_default();
        send_step[i] = *n;
        *n += 1;
    }
    for (i, r) in recvs.iter().enumerate() {
        let n = per_peer.entry((r.peer, false)).or_default();
        recv_step[i] = *n;
        *n += 1;
    }
    let steps = per_peer.values().copied().max().unwrap_or(0);
    let mut recvs: Vec<Option<&mut P2pRecv<'_, T>>> = recvs.iter_mut().map(Some).collect();
    for step in 0..steps {
        let ss: Vec<(Fingerprint, SendReq<'_>)> = sends
            .iter()
            .zip(&send_step)
            .filter(|(_, k)| **k == step)
            .map(|(s, _)| {
                let req = SendReq {
                    peer: s.peer,
                    data: bytemuck::cast_slice(s.buf),
                };
                (p2p_fingerprint::<T>(s.seq, s.buf.len(), s.tag), req)
            })
            .collect();
        let mut rs: Vec<(Fingerprint, RecvReq<'_>)> = recvs
            .iter_mut()
            .zip(&recv_step)
            .filter(|(_, k)| **k == step)
            .filter_map(|(r, _)| r.take())
            .map(|r| {
                let fp = p2p_fingerprint::<T>(r.seq, r.buf.len(), r.tag);
                let req = RecvReq {
                    peer: r.peer,
                    buf: bytemuck::cast_slice_mut(&mut *r.buf),
                };
                (fp, req)
            })
            .collect();
        t.exchange_p2p(&ss, &mut rs)?;
    }
    Ok(())
}
