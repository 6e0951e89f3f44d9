//! The progress engine of [`crate::TcpTransport`]: drives one step's sends and receives over
//! non-blocking sockets from the calling thread.
//!
//! Note [Spin then poll]: waking a sleeping process costs ~40-50 µs on the machines we target,
//! more than a whole 4 KiB exchange. The engine therefore retries non-blocking reads and
//! writes for a short spin window before it sleeps in `poll(2)`; the window is short enough
//! that a rank never burns a core its peer needs for compute for long.

use std::{
    io::{self, IoSlice, IoSliceMut, Read, Write},
    net::TcpStream,
    os::fd::AsRawFd,
    time::{Duration, Instant},
};

use phalanx_core::Timeout;

use crate::{
    frame::{self, Header, HEADER_LEN},
    Error, Fingerprint, RecvReq, Result, SendReq,
};

/// How long to spin on non-blocking calls before sleeping in poll.
const SPIN: Duration = Duration::from_micros(50);
/// Longest single poll sleep, so that an abort from another thread is noticed promptly.
const POLL_SLICE_MS: i32 = 100;

/// One connection to a peer.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    /// False while a frame is half written: an abort frame may then not be sent.
    pub(crate) at_frame_boundary: bool,
}

struct SendState<'a> {
    peer: usize,
    header: [u8; HEADER_LEN],
    done: usize,
    data: &'a [u8],
}

struct RecvState<'r, 'a> {
    peer: usize,
    header: [u8; HEADER_LEN],
    done: usize,
    buf: &'r mut [u8],
    _a: std::marker::PhantomData<&'a ()>,
}

impl SendState<'_> {
    fn total(&self) -> usize {
        HEADER_LEN + self.data.len()
    }
}

impl RecvState<'_, '_> {
    fn total(&self) -> usize {
        HEADER_LEN + self.buf.len()
    }
}

/// Performs one exchange; see [`crate::Transport::exchange`].
pub(crate) fn exchange(
    me: usize,
    conns: &mut [Option<Conn>],
    fp: &Fingerprint,
    sends: &[SendReq<'_>],
    recvs: &mut [RecvReq<'_>],
    timeout: Duration,
    aborted: &dyn Fn() -> Option<String>,
) -> Result<()> {
    let mut ss: Vec<SendState<'_>> = sends
        .iter()
        .map(|s| SendState {
            peer: s.peer,
            header: frame::encode_data(fp, s.data.len()),
            done: 0,
            data: s.data,
        })
        .collect();
    let mut rs: Vec<RecvState<'_, '_>> = recvs
        .iter_mut()
        .map(|r| RecvState {
            peer: r.peer,
            header: [0; HEADER_LEN],
            done: 0,
            buf: &mut *r.buf,
            _a: std::marker::PhantomData,
        })
        .collect();
    for s in &ss {
        conn(conns, s.peer, fp)?.at_frame_boundary = false;
    }
    let mut deadline = Timeout::new(timeout);
    let mut idle_since: Option<Instant> = None;
    loop {
        let mut progressed = false;
        for s in ss.iter_mut().filter(|s| s.done < s.total()) {
            let c = conn(conns, s.peer, fp)?;
            loop {
                let res = if s.done < HEADER_LEN {
                    c.stream
                        .write_vectored(&[IoSlice::new(&s.header[s.done..]), IoSlice::new(s.data)])
                } else {
                    c.stream.write(&s.data[s.done - HEADER_LEN..])
                };
                match res {
                    Ok(0) => return Err(closed(s.peer, fp)),
                    Ok(n) => {
                        s.done += n;
                        progressed = true;
                        if s.done == s.total() {
                            c.at_frame_boundary = true;
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(io_err(s.peer, "send", e, fp)),
                }
            }
        }
        for r in rs.iter_mut().filter(|r| r.done < r.total()) {
            let c = conn(conns, r.peer, fp)?;
            loop {
                let res = if r.done < HEADER_LEN {
                    let (h, b) = (&mut r.header[r.done..], &mut *r.buf);
                    c.stream
                        .read_vectored(&mut [IoSliceMut::new(h), IoSliceMut::new(b)])
                } else {
                    c.stream.read(&mut r.buf[r.done - HEADER_LEN..])
                };
                match res {
                    Ok(0) => return Err(closed(r.peer, fp)),
                    Ok(n) => {
                        let was = r.done;
                        r.done += n;
                        progressed = true;
                        if was < HEADER_LEN && r.done >= HEADER_LEN {
                            check_header(me, c, r.peer, &r.header, fp, r.buf, r.done - HEADER_LEN)?;
                        }
                        if r.done == r.total() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(io_err(r.peer, "recv", e, fp)),
                }
            }
        }
        let pending_s: Vec<usize> = ss
            .iter()
            .filter(|s| s.done < s.total())
            .map(|s| s.peer)
            .collect();
        let pending_r: Vec<usize> = rs
            .iter()
            .filter(|r| r.done < r.total())
            .map(|r| r.peer)
            .collect();
        if pending_s.is_empty() && pending_r.is_empty() {
            return Ok(());
        }
        if progressed {
            deadline.progress();
            idle_since = None;
            continue;
        }
        let idle = *idle_since.get_or_insert_with(Instant::now);
        if idle.elapsed() < SPIN {
            std::hint::spin_loop();
            continue;
        }
        if let Some(reason) = aborted() {
            return Err(Error::Aborted { reason });
        }
        let Some(left) = deadline.remaining() else {
            let mut waiting_for = pending_r.clone();
            waiting_for.extend(pending_s.iter().copied());
            waiting_for.sort_unstable();
            waiting_for.dedup();
            return Err(Error::Timeout {
                during: fp.to_string(),
                waiting_for,
                after: timeout,
            });
        };
        poll(conns, &pending_s, &pending_r, left)?;
    }
}

fn conn<'c>(conns: &'c mut [Option<Conn>], peer: usize, fp: &Fingerprint) -> Result<&'c mut Conn> {
    conns
        .get_mut(peer)
        .and_then(Option::as_mut)
        .ok_or_else(|| closed(peer, fp))
}

/// Validates a freshly completed header. `prefix` payload bytes were already read into `buf`
/// by the vectored read; for an abort frame they are the start of the reason.
fn check_header(
    me: usize,
    c: &mut Conn,
    peer: usize,
    header: &[u8; HEADER_LEN],
    fp: &Fingerprint,
    buf: &[u8],
    prefix: usize,
) -> Result<()> {
    match frame::decode(header).map_err(|source| Error::Frame { peer, source })? {
        Header::Data { fp: theirs, len } => {
            if theirs != *fp {
                return Err(Error::Mismatch {
                    me,
                    peer,
                    ours: *fp,
                    theirs,
                });
            }
            if len != buf.len() {
                return Err(Error::Length {
                    me,
                    peer,
                    fp: *fp,
                    expected: buf.len(),
                    got: len,
                });
            }
            Ok(())
        }
        Header::Abort { len } => {
            let mut reason = buf[..prefix.min(len)].to_vec();
            let mut rest = vec![0u8; len - reason.len()];
            let _ = c.stream.set_nonblocking(false);
            let _ = c.stream.set_read_timeout(Some(Duration::from_secs(1)));
            if c.stream.read_exact(&mut rest).is_ok() {
                reason.extend_from_slice(&rest);
            }
            Err(Error::PeerAborted {
                peer,
                reason: String::from_utf8_lossy(&reason).into_owned(),
            })
        }
    }
}

fn poll(conns: &[Option<Conn>], sends: &[usize], recvs: &[usize], left: Duration) -> Result<()> {
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(sends.len() + recvs.len());
    let mut add = |peer: usize, events: libc::c_short| {
        if let Some(Some(c)) = conns.get(peer) {
            let fd = c.stream.as_raw_fd();
            match fds.iter_mut().find(|p| p.fd == fd) {
                Some(p) => p.events |= events,
                None => fds.push(libc::pollfd {
                    fd,
                    events,
                    revents: 0,
                }),
            }
        }
    };
    sends.iter().for_each(|&p| add(p, libc::POLLOUT));
    recvs.iter().for_each(|&p| add(p, libc::POLLIN));
    let ms = (left.as_millis() as i32).clamp(1, POLL_SLICE_MS);
    // SAFETY: `fds` is a valid, initialised array of pollfd for the duration of the call.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(Error::Io {
                peer: recvs.first().or(sends.first()).copied().unwrap_or(0),
                op: "poll",
                source: e,
            });
        }
    }
    Ok(())
}

fn closed(peer: usize, fp: &Fingerprint) -> Error {
    Error::PeerClosed {
        peer,
        during: fp.to_string(),
    }
}

fn io_err(peer: usize, op: &'static str, e: io::Error, fp: &Fingerprint) -> Error {
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
