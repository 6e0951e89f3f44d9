//! all_to_all: every rank sends block `p` of its input to rank `p`, in one step with all peers
//! (the transport moves every direction at once). Splits may differ per pair
//! (`all_to_all_single` with split sizes); the frame lengths check them.

use phalanx_core::Element;
use phalanx_transport::{CollectiveKind, RecvReq, Result, SendReq, Transport};

use crate::{fingerprint::fp, Algorithm};

/// Sends `send[send_offsets[p]..][..send_counts[p]]` to rank `p` and receives rank `p`'s block
/// for this rank into `recv[recv_offsets(p)..][..recv_counts[p]]` (blocks packed in rank
/// order). `send_counts[p]` here must equal `recv_counts[rank]` on rank `p`; a mismatch fails
/// on the receiver, naming both lengths.
pub fn all_to_all<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    send: &[T],
    send_counts: &[usize],
    recv: &mut [T],
    recv_counts: &[usize],
) -> Result<Algorithm> {
    let (n, r) = (t.world_size(), t.rank());
    assert_eq!(send_counts.len(), n, "all_to_all: one send count per rank");
    assert_eq!(recv_counts.len(), n, "all_to_all: one recv count per rank");
    assert_eq!(
        send.len(),
        send_counts.iter().sum::<usize>(),
        "all_to_all: send size"
    );
    assert_eq!(
        recv.len(),
        recv_counts.iter().sum::<usize>(),
        "all_to_all: recv size"
    );
    // Counts differ per pair, so the fingerprint carries none; frame lengths are checked.
    let fp = fp::<T>(seq, CollectiveKind::AllToAll, None, 0, 0);
    let mut send_blocks: Vec<&[T]> = Vec::with_capacity(n);
    let mut rest = send;
    for &c in send_counts {
        let (b, tail) = rest.split_at(c);
        send_blocks.push(b);
        rest = tail;
    }
    let mut recv_blocks: Vec<&mut [T]> = Vec::with_capacity(n);
    let mut rest: &mut [T] = recv;
    for &c in recv_counts {
        let (b, tail) = std::mem::take(&mut rest).split_at_mut(c);
        recv_blocks.push(b);
        rest = tail;
    }
    assert_eq!(
        send_blocks[r].len(),
        recv_blocks[r].len(),
        "all_to_all: this rank's own send and recv counts differ"
    );
    recv_blocks[r].copy_from_slice(send_blocks[r]);
    if n == 1 {
        return Ok(Algorithm::Local);
    }
    let sends: Vec<SendReq<'_>> = (0..n)
        .filter(|&p| p != r)
        .map(|peer| SendReq {
            peer,
            data: bytemuck::cast_slice(send_blocks[peer]),
        })
        .collect();
    let mut recvs: Vec<RecvReq<'_>> = recv_blocks
        .into_iter()
        .enumerate()
        .filter(|(p, _)| *p != r)
        .map(|(peer, b)| RecvReq {
            peer,
            buf: bytemuck::cast_slice_mut(b),
        })
        .collect();
    t.exchange(&fp, &sends, &mut recvs)?;
    Ok(Algorithm::Direct)
}
