//! A frame read ahead from a peer while a step waits (Note [Sends that read] in `mod.rs`).

use std::io::{self, Read};

use phalanx_core::Timeout;

use super::conn::Conn;
use crate::{
    frame::{self, Header, HEADER_LEN},
    Error, Fingerprint, Result,
};

/// A frame read ahead from a peer while a point-to-point step waits (Note [Sends that read]),
/// a few bytes at a time as they come: its sender may be waiting for this rank to read its
/// own frame meanwhile.
pub(super) struct Ahead {
    header: [u8; HEADER_LEN],
    /// Bytes of the frame read so far, its header's included.
    pub(super) done: usize,
    /// The frame's fingerprint, once its header is in.
    fp: Option<Fingerprint>,
    /// The payload, sized once the header is in.
    data: Vec<u8>,
    /// The peer closed the connection: it sends no more. Its error, if any, reaches the
    /// receive that needs its frames, or the step that sends to it.
    pub(super) ended: bool,
}

impl Ahead {
    pub(super) fn new() -> Ahead {
        Ahead {
            header: [0; HEADER_LEN],
            done: 0,
            fp: None,
            data: Vec::new(),
            ended: false,
        }
    }

    /// Reads what `c` has of the frame without waiting: whether a byte came. A whole frame
    /// goes to the connection's `early` queue and this starts afresh.
    pub(super) fn read(&mut self, c: &mut Conn, peer: usize) -> Result<bool> {
        let mut any = false;
        loop {
            let res = match self.fp {
                None => c.stream.read(&mut self.header[self.done..]),
                Some(_) => c.stream.read(&mut self.data[self.done - HEADER_LEN..]),
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
                self.begin(c, peer)?;
            }
            if self.fp.is_some() && self.done == HEADER_LEN + self.data.len() {
                self.complete(c);
            }
        }
    }

    /// Reads the rest of a begun frame, waiting for it within the step's `deadline`: at the
    /// end of a step, which must not leave half a frame read. Its sender is writing it in a
    /// step of its own, whose writes go on while this rank reads.
    pub(super) fn finish(
        &mut self,
        c: &mut Conn,
        peer: usize,
        during: &Fingerprint,
        deadline: &mut Timeout,
        aborted: &dyn Fn() -> Option<String>,
    ) -> Result<()> {
        if self.fp.is_none() {
            let at = self.done;
            c.read_fully(peer, during, &mut self.header[at..], deadline, aborted)?;
            self.done = HEADER_LEN;
            self.begin(c, peer)?;
        }
        let at = self.done - HEADER_LEN;
        c.read_fully(peer, during, &mut self.data[at..], deadline, aborted)?;
        self.complete(c);
        Ok(())
    }

    /// Takes the frame's whole header: a data frame's payload is sized; an abort frame ends
    /// the step with its reason.
    fn begin(&mut self, c: &mut Conn, peer: usize) -> Result<()> {
        match frame::decode(&self.header).map_err(|source| Error::Frame { peer, source })? {
            Header::Data { fp, len } => {
                self.fp = Some(fp);
                self.data = vec![0; len];
                Ok(())
            }
            Header::Abort { len } => Err(c.abort_reason(peer, Vec::new(), len)),
        }
    }

    /// Queues the whole frame and starts afresh.
    fn complete(&mut self, c: &mut Conn) {
        let done = std::mem::replace(self, Ahead::new());
        let fp = done.fp.expect("a frame is completed once its header is in");
        c.early.push_back((fp, done.data));
    }
}
