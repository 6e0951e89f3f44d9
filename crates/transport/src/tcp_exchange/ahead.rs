//! A frame read from a peer before any receive asked for it (Note [Sends that read] in
//! `mod.rs`): by a point-to-point step that waits, or by the connection's background progress
//! (Note [Background progress]).

use std::{
    collections::VecDeque,
    io::{self, Read},
    net::TcpStream,
    time::Duration,
};

use crate::{
    frame::{self, Header, HEADER_LEN},
    Error, Fingerprint, Result,
};

/// A frame read ahead from one peer, a few bytes at a time as they come: its sender may be
/// waiting for this rank to read its own frame meanwhile. It lives in its connection, so a
/// frame begun by one reader is finished by the next, before anything else is read there.
#[derive(Debug, Default)]
pub(super) struct Ahead {
    header: [u8; HEADER_LEN],
    /// Bytes of the frame read so far, its header's included.
    done: usize,
    /// The frame's fingerprint, once its header is in.
    fp: Option<Fingerprint>,
    /// The payload, sized once the header is in.
    data: Vec<u8>,
    /// The peer closed the connection: it sends no more. Its error, if any, reaches the
    /// receive that needs its frames, or the step that sends to it.
    pub(super) ended: bool,
}

impl Ahead {
    /// Whether part of a frame was read and the rest was not.
    pub(super) fn begun(&self) -> bool {
        self.done > 0
    }

    /// Reads what `stream` has of the frame without waiting: whether a byte came. A whole
    /// frame goes to `early` and this starts afresh.
    pub(super) fn read(
        &mut self,
        stream: &mut TcpStream,
        early: &mut VecDeque<(Fingerprint, Vec<u8>)>,
        peer: usize,
    ) -> Result<bool> {
        let mut any = false;
        loop {
            let res = match self.fp {
                None => stream.read(&mut self.header[self.done..]),
                Some(_) => stream.read(&mut self.data[self.done - HEADER_LEN..]),
            };
            let n = match res {
                Ok(0) => {
                    self.ended = true;
                    return Ok(any);
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(any),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // A reset or another failure of a link this step neither sends nor receives
                // on: as a close, for the operation that needs the link to report.
                Err(_) => {
                    self.ended = true;
                    return Ok(any);
                }
            };
            any = true;
            self.done += n;
            if self.fp.is_none() && self.done == HEADER_LEN {
                self.begin(stream, peer)?;
            }
            if self.fp.is_some() && self.done == HEADER_LEN + self.data.len() {
                let done = std::mem::take(self);
                let fp = done.fp.expect("a frame is completed once its header is in");
                early.push_back((fp, done.data));
            }
        }
    }

    /// Takes the frame's whole header: a data frame's payload is sized; an abort frame ends
    /// the reading with its reason.
    fn begin(&mut self, stream: &mut TcpStream, peer: usize) -> Result<()> {
        match frame::decode(&self.header).map_err(|source| Error::Frame { peer, source })? {
            Header::Data { fp, len } => {
                self.fp = Some(fp);
                self.data = vec![0; len];
                Ok(())
            }
            Header::Abort { len } => {
                self.ended = true;
                Err(abort_reason(stream, peer, Vec::new(), len))
            }
        }
    }
}

/// The error of a peer's abort frame of `len` bytes, of which `have` were read: the rest is
/// read in a blocking way for at most a second, as it is the last thing the peer sent. The
/// link is non-blocking again after it, so that a step that still sends to the peer waits
/// within its deadline.
pub(super) fn abort_reason(
    stream: &mut TcpStream,
    peer: usize,
    mut have: Vec<u8>,
    len: usize,
) -> Error {
    let mut rest = vec![0u8; len.saturating_sub(have.len())];
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream.read_exact(&mut rest).is_ok() {
        have.extend_from_slice(&rest);
    }
    let _ = stream.set_read_timeout(None);
    let _ = stream.set_nonblocking(true);
    Error::PeerAborted {
        peer,
        reason: String::from_utf8_lossy(&have).into_owned(),
    }
}
