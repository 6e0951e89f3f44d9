//! The [`Transport`] trait: what collective algorithms see of the network.

use crate::{Fingerprint, Result};

/// One message to send in an [`Transport::exchange`].
#[derive(Debug)]
pub struct SendReq<'a> {
    /// Destination rank.
    pub peer: usize,
    /// Bytes to send as one frame.
    pub data: &'a [u8],
}

/// One message to receive in an [`Transport::exchange`].
#[derive(Debug)]
pub struct RecvReq<'a> {
    /// Source rank.
    pub peer: usize,
    /// Exactly this many bytes are expected, as one frame.
    pub buf: &'a mut [u8],
}

/// Framed, fingerprinted byte exchange between the ranks of a group.
///
/// Algorithms never see sockets: they describe one step as a set of sends and receives and the
/// transport moves them concurrently (so a ring never deadlocks on full socket buffers). Each
/// step carries the collective's [`Fingerprint`]; a receive whose frame carries another
/// fingerprint fails with [`crate::Error::Mismatch`].
pub trait Transport: Send {
    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// Performs every send and receive of one step concurrently; at most one send and one
    /// receive per peer.
    fn exchange(
        &mut self,
        fp: &Fingerprint,
        sends: &[SendReq<'_>],
        recvs: &mut [RecvReq<'_>],
    ) -> Result<()>;
    /// Point-to-point messages, each with its own fingerprint (a sequence per pair of ranks),
    /// moved concurrently like one step: `batch_isend_irecv`'s building block. At most one send
    /// and one receive per peer. Frames of this stream and of the collectives may arrive in
    /// either order on a connection; each stream keeps its own order.
    fn exchange_p2p(
        &mut self,
        sends: &[(Fingerprint, SendReq<'_>)],
        recvs: &mut [(Fingerprint, RecvReq<'_>)],
    ) -> Result<()>;
    /// Tells every peer that this rank gives up, and why, then closes the connections.
    /// Later calls fail with [`crate::Error::Aborted`].
    fn abort(&mut self, reason: &str);
    /// How long a wait spins before it sleeps (Note [Spin then poll] in `tcp_exchange/mod.rs`):
    /// longer for a caller that waits with nothing else to do on a core of its own. A
    /// transport that does not spin ignores it.
    fn set_wait_spin(&mut self, _spin: std::time::Duration) {}
    /// Reads the peers' frames ahead on a thread of its own while no step runs, so that every
    /// send to this rank completes while it computes (Note [Background progress] in
    /// `tcp_exchange/background.rs`). For a group of few, large messages (a pipeline's). A
    /// transport without it ignores it.
    fn start_progress(&mut self) -> Result<()> {
        Ok(())
    }

    /// Sends one frame to `peer`.
    fn send(&mut self, fp: &Fingerprint, peer: usize, data: &[u8]) -> Result<()> {
        self.exchange(fp, &[SendReq { peer, data }], &mut [])
    }
    /// Receives one frame from `peer` into `buf`.
    fn recv(&mut self, fp: &Fingerprint, peer: usize, buf: &mut [u8]) -> Result<()> {
        self.exchange(fp, &[], &mut [RecvReq { peer, buf }])
    }
    /// Sends to `to` while receiving from `from`.
    fn send_recv(
        &mut self,
        fp: &Fingerprint,
        to: usize,
        data: &[u8],
        from: usize,
        buf: &mut [u8],
    ) -> Result<()> {
        self.exchange(
            fp,
            &[SendReq { peer: to, data }],
            &mut [RecvReq { peer: from, buf }],
        )
    }
}
