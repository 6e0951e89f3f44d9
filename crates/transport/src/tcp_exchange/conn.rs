//! One connection of the TCP mesh as the progress engine sees it: the socket, whether a frame
//! is half written, the frames that came before their receive, and the blocking reads a step
//! makes on it within its deadline.

use std::{
    collections::VecDeque,
    io::{self, Read},
    net::TcpStream,
    os::fd::AsRawFd,
};

use phalanx_core::Timeout;

use super::ahead::Ahead;
use crate::{Error, Fingerprint, Result};

/// Longest single poll sleep, so that an abort from another thread is noticed promptly.
pub(super) const POLL_SLICE_MS: i32 = 100;

/// One connection to a peer.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    /// False while a frame is half written: an abort frame may then not be sent.
    pub(crate) at_frame_boundary: bool,
    /// Complete frames that arrived before their receive: of the other stream (Note [Early
    /// frames]), or read while a point-to-point send waited (Note [Sends that read]), oldest
    /// first.
    pub(crate) early: VecDeque<(Fingerprint, Vec<u8>)>,
    /// A frame read ahead of its receive, whole or begun (Note [Sends that read]).
    pub(super) ahead: Ahead,
    /// What the background progress found on this link (a peer's abort, a damaged frame):
    /// the next step that receives from the peer reports it (Note [Background progress]).
    pub(super) failed: Option<Error>,
}

impl Conn {
    pub(crate) fn new(stream: TcpStream) -> Conn {
        Conn {
            stream,
            at_frame_boundary: true,
            early: VecDeque::new(),
            ahead: Ahead::default(),
            failed: None,
        }
    }

    /// Reads ahead what the peer sent without waiting (Note [Sends that read]): whether a
    /// byte came.
    pub(super) fn read_ahead(&mut self, peer: usize) -> Result<bool> {
        let Conn {
            stream,
            early,
            ahead,
            ..
        } = self;
        ahead.read(stream, early, peer)
    }

    /// What was found on this link before a step that sends to or receives from the peer:
    /// the background progress's error (reported once; the link has ended), or a frame read
    /// ahead whose peer ended before its last byte.
    pub(super) fn check(&mut self, peer: usize, fp: &Fingerprint) -> Result<()> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        if self.ahead.begun() && self.ahead.ended {
            return Err(closed(peer, fp));
        }
        Ok(())
    }

    /// Reads the rest of a frame begun ahead, waiting for it within `deadline`: a step leaves
    /// none begun (its sender is writing it in a step of its own, whose writes go on while
    /// this rank reads, and which a later step of this rank that reads nothing ahead from
    /// that peer, a collective, would otherwise leave waiting).
    pub(super) fn finish_ahead(
        &mut self,
        peer: usize,
        during: &Fingerprint,
        deadline: &mut Timeout,
        aborted: &dyn Fn() -> Option<String>,
    ) -> Result<()> {
        while self.ahead.begun() {
            if self.read_ahead(peer)? {
                deadline.progress();
                continue;
            }
            self.check(peer, during)?;
            if self.ahead.begun() {
                self.wait_readable(peer, during, deadline, aborted)?;
            }
        }
        Ok(())
    }

    /// Waits in `poll(2)` until the link is readable, for at most a slice, within `deadline`.
    fn wait_readable(
        &mut self,
        peer: usize,
        fp: &Fingerprint,
        deadline: &mut Timeout,
        aborted: &dyn Fn() -> Option<String>,
    ) -> Result<()> {
        if let Some(reason) = aborted() {
            return Err(Error::Aborted { reason });
        }
        let Some(left) = deadline.remaining() else {
            return Err(Error::Timeout {
                during: fp.to_string(),
                waiting_for: vec![peer],
                after: deadline.limit(),
            });
        };
        let mut fd = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = (left.as_millis() as i32).clamp(1, POLL_SLICE_MS);
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut fd, 1, ms) };
        Ok(())
    }

    /// Reads exactly `buf.len()` bytes from a non-blocking connection, waiting in `poll(2)`, within
    /// the exchange's progress timeout.
    pub(super) fn read_fully(
        &mut self,
        peer: usize,
        fp: &Fingerprint,
        buf: &mut [u8],
        deadline: &mut Timeout,
        aborted: &dyn Fn() -> Option<String>,
    ) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.stream.read(&mut buf[done..]) {
                Ok(0) => return Err(closed(peer, fp)),
                Ok(n) => {
                    done += n;
                    deadline.progress();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wait_readable(peer, fp, deadline, aborted)?;
                }
                Err(e) => return Err(io_err(peer, "recv", e, fp)),
            }
        }
        Ok(())
    }
}

pub(super) fn closed(peer: usize, fp: &Fingerprint) -> Error {
    Error::PeerClosed {
        peer,
        during: fp.to_string(),
    }
}

pub(super) fn io_err(peer: usize, op: &'static str, e: io::Error, fp: &Fingerprint) -> Error {
    match e.kind() {
        io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::UnexpectedEof => closed(peer, fp),
        _ => Error::Io {
            peer,
            op,
            source: e,
        },
    }
}
