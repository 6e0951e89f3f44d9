//! The progress engine of [`crate::TcpTransport`]: drives one step's sends and receives over
//! non-blocking sockets from the calling thread.
//!
//! Note [Spin then poll]: waking a sleeping process costs ~40-50 µs on the machines we target,
//! more than a whole 4 KiB exchange. The engine therefore retries non-blocking reads and
//! writes for a short spin window before it sleeps in `poll(2)`; the window is short enough
//! that a rank never burns a core its peer needs for compute for long. A group whose caller
//! waits with nothing else to do, on a core of its own, may spin longer
//! ([`crate::Transport::set_wait_spin`]): a pipeline stage waits a whole microbatch's compute
//! for its peer's message, and on a virtual machine a sleeping thread took ~1 ms to wake
//! (docs/train.md), a third of a microbatch's forward and backward there.
//!
//! Note [Early frames]: collectives (one group-wide sequence) and point-to-point messages (a
//! sequence per pair of ranks) share each connection, and a peer may be one step ahead in the
//! other stream: rank 0 sends to rank 1 and enters an allreduce while rank 1 enters the
//! allreduce first and receives afterwards. A receive that finds a complete frame of the
//! other stream keeps it in the connection's `early` queue and reads on; a later receive of
//! that stream takes its frames from the queue first, in order. Within one stream frames must
//! still match exactly, so a real mismatch fails as before, naming both calls.
//!
//! Note [Sends that read]: a point-to-point send completes without its receive posted, whatever
//! its size, as `isend` does. One that fits in the socket buffers does so anyway; a larger one
//! waits for its peer to read. Two ranks that each send the other a large message with no
//! receive posted (a pipeline sends an activation as soon as it is computed and receives one
//! only when it is needed) would then wait for each other forever. So a point-to-point step
//! that waits also reads whole frames from every peer it has no receive pending from, into
//! that connection's `early` queue, where the receive that matches them takes them in order.
//! A send then waits only until its peer waits in a point-to-point step of its own (or is in a
//! receive from this rank), never for the matching receive: where every rank's program would
//! run to its end with sends that never wait, it does here, whatever the messages' sizes (a
//! peer that receives from this rank reads this send's frame, the next of the pair; one that
//! waits on another reads it ahead). A large send to a peer that is computing still waits for
//! that compute to end, unless the peer's group reads ahead in the background (Note
//! [Background progress] in `background.rs`). A frame is read ahead a few bytes at a time as
//! they come, into its connection's state (`ahead.rs`): a step reads a frame it began to its
//! end before it returns (its sender waits for that, and the next step may be one that reads
//! nothing ahead), and a step finishes a frame the background progress began before anything
//! else. Reading ahead is not the step's own progress: it keeps the step
//! spinning but does not put off its timeout. What is read ahead is held in memory until its
//! receive comes, as an MPI library holds unexpected messages: a peer that streams sends to a
//! rank busy with another peer grows that rank's queue instead of meeting TCP's back-pressure.
//! Collective steps do not read ahead (their sends and receives are paired), except in a group
//! that started its background progress, once they have spun: there a send to a rank that
//! waits in a collective of the same group completes too (Note [Background progress]).

mod ahead;
mod background;
mod conn;

use std::{
    io::{self, IoSlice, IoSliceMut, Read, Write},
    os::fd::AsRawFd,
    time::{Duration, Instant},
};

use phalanx_core::Timeout;

use crate::{
    frame::{self, Header, HEADER_LEN},
    CollectiveKind, Error, Fingerprint, RecvReq, Result, SendReq,
};
pub(crate) use background::Background;
pub(crate) use conn::Conn;
use conn::{closed, io_err, POLL_SLICE_MS};

/// How long to spin on non-blocking calls before sleeping in poll, unless the transport was
/// told otherwise (Note [Spin then poll]).
pub(crate) const SPIN: Duration = Duration::from_micros(50);

/// Whether a frame belongs to the point-to-point stream of its pair of ranks rather than to
/// the group's collective stream.
fn point_to_point(fp: &Fingerprint) -> bool {
    fp.kind == CollectiveKind::SendRecv
}

struct SendState<'a> {
    peer: usize,
    fp: Fingerprint,
    header: [u8; HEADER_LEN],
    done: usize,
    data: &'a [u8],
}

struct RecvState<'r, 'a> {
    peer: usize,
    fp: Fingerprint,
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

/// Performs one exchange; see [`crate::Transport::exchange`]. Each send and receive carries
/// its own fingerprint (point-to-point batches use one sequence per pair); `during` names the
/// step in a timeout. `collectives_read`: a collective step that waits past its spin reads the
/// other peers' frames ahead too (under background progress: Note [Background progress]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn exchange<'s, 'a: 's, 'r, 'b: 'r>(
    me: usize,
    conns: &mut [Option<Conn>],
    during: &Fingerprint,
    sends: impl Iterator<Item = (Fingerprint, &'s SendReq<'a>)>,
    recvs: impl Iterator<Item = (Fingerprint, &'r mut RecvReq<'b>)>,
    (timeout, spin): (Duration, Duration),
    collectives_read: bool,
    aborted: &dyn Fn() -> Option<String>,
) -> Result<()> {
    let mut ss: Vec<SendState<'_>> = sends
        .map(|(fp, s)| SendState {
            peer: s.peer,
            fp,
            header: frame::encode_data(&fp, s.data.len()),
            done: 0,
            data: s.data,
        })
        .collect();
    let mut rs: Vec<RecvState<'_, '_>> = recvs
        .map(|(fp, r)| RecvState {
            peer: r.peer,
            fp,
            header: [0; HEADER_LEN],
            done: 0,
            buf: &mut *r.buf,
            _a: std::marker::PhantomData,
        })
        .collect();
    let mut deadline = Timeout::new(timeout);
    // What was read ahead before this step (Note [Background progress]) comes first: a frame
    // begun is finished, and what was found on a link this step uses (every link, for a
    // point-to-point step, which reads ahead from all) is reported.
    let reads_ahead = point_to_point(during);
    for (peer, c) in conns.iter_mut().enumerate() {
        if let Some(c) = c.as_mut() {
            c.finish_ahead(peer, during, &mut deadline, aborted)?;
            if reads_ahead && peer != me {
                c.check(peer, during)?;
            }
        }
    }
    for s in &ss {
        let c = conn(conns, s.peer, &s.fp)?;
        c.check(s.peer, &s.fp)?;
        c.at_frame_boundary = false;
    }
    // Frames that arrived early (Note [Early frames]) complete their receives at once.
    for r in rs.iter_mut() {
        let c = conn(conns, r.peer, &r.fp)?;
        c.check(r.peer, &r.fp)?;
        take_early(me, c, r)?;
    }
    let mut idle_since: Option<Instant> = None;
    loop {
        let mut progressed = false;
        for s in ss.iter_mut().filter(|s| s.done < s.total()) {
            let c = conn(conns, s.peer, &s.fp)?;
            loop {
                let res = if s.done < HEADER_LEN {
                    c.stream
                        .write_vectored(&[IoSlice::new(&s.header[s.done..]), IoSlice::new(s.data)])
                } else {
                    c.stream.write(&s.data[s.done - HEADER_LEN..])
                };
                match res {
                    Ok(0) => return Err(closed(s.peer, &s.fp)),
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
                    Err(e) => return Err(io_err(s.peer, "send", e, &s.fp)),
                }
            }
        }
        for r in rs.iter_mut().filter(|r| r.done < r.total()) {
            let c = conn(conns, r.peer, &r.fp)?;
            loop {
                let res = if r.done < HEADER_LEN {
                    let (h, b) = (&mut r.header[r.done..], &mut *r.buf);
                    c.stream
                        .read_vectored(&mut [IoSliceMut::new(h), IoSliceMut::new(b)])
                } else {
                    c.stream.read(&mut r.buf[r.done - HEADER_LEN..])
                };
                match res {
                    Ok(0) => return Err(closed(r.peer, &r.fp)),
                    Ok(n) => {
                        let was = r.done;
                        r.done += n;
                        progressed = true;
                        if was < HEADER_LEN && r.done >= HEADER_LEN {
                            let mut rest = Timeout::new(timeout);
                            take_header(me, c, r, &mut rest, aborted)?;
                        }
                        if r.done == r.total() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(io_err(r.peer, "recv", e, &r.fp)),
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
        // Note [Sends that read]: the peers a waiting point-to-point step reads ahead from
        // (for a collective step, none, or under background progress the same once it has
        // spun: its small exchanges' spin stays as it was).
        let polling = idle_since.is_some_and(|t| t.elapsed() >= spin);
        let reads_from = |peer: usize, conns: &[Option<Conn>]| {
            (reads_ahead || (collectives_read && polling))
                && peer != me
                && !pending_r.contains(&peer)
                && conns[peer].as_ref().is_some_and(|c| !c.ahead.ended)
        };
        if pending_s.is_empty() && pending_r.is_empty() {
            // A frame begun is read to its end: its sender waits for that, and the next step
            // may be one that reads nothing ahead.
            for (peer, c) in conns.iter_mut().enumerate() {
                if let Some(c) = c.as_mut() {
                    c.finish_ahead(peer, during, &mut deadline, aborted)?;
                }
            }
            return Ok(());
        }
        if progressed {
            deadline.progress();
            idle_since = None;
            continue;
        }
        // Waiting: read what the peers sent without a receive here. That is not this step's
        // progress: it keeps the step spinning, but a peer that streams to this rank puts off
        // neither its timeout nor its abort (below, once the deadline has passed).
        let mut read_ahead = false;
        for peer in 0..conns.len() {
            if reads_from(peer, conns) {
                read_ahead |= conn(conns, peer, during)?.read_ahead(peer)?;
            }
        }
        if read_ahead && deadline.remaining().is_some() && aborted().is_none() {
            idle_since = None;
            continue;
        }
        let idle = *idle_since.get_or_insert_with(Instant::now);
        if idle.elapsed() < spin {
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
                during: during.to_string(),
                waiting_for,
                after: timeout,
            });
        };
        let mut readable: Vec<usize> = (0..conns.len()).filter(|&p| reads_from(p, conns)).collect();
        readable.extend(&pending_r);
        poll(conns, &pending_s, &readable, left)?;
    }
}

/// Completes receive `r` from the first frame of its stream that came early on `c` (Note
/// [Early frames]): whether there was one.
fn take_early(me: usize, c: &mut Conn, r: &mut RecvState<'_, '_>) -> Result<bool> {
    let stream = point_to_point(&r.fp);
    let Some(i) = c
        .early
        .iter()
        .position(|(fp, _)| point_to_point(fp) == stream)
    else {
        return Ok(false);
    };
    let (theirs, data) = c.early.remove(i).expect("position is in range");
    accept(me, r.peer, &r.fp, &theirs, data.len(), r.buf.len())?;
    r.buf.copy_from_slice(&data);
    r.done = r.total();
    Ok(true)
}

fn conn<'c>(conns: &'c mut [Option<Conn>], peer: usize, fp: &Fingerprint) -> Result<&'c mut Conn> {
    conns
        .get_mut(peer)
        .and_then(Option::as_mut)
        .ok_or_else(|| closed(peer, fp))
}

/// Checks that a frame of `theirs` with `len` payload bytes is the one this receive of `ours`
/// into `cap` bytes expects.
fn accept(
    me: usize,
    peer: usize,
    ours: &Fingerprint,
    theirs: &Fingerprint,
    len: usize,
    cap: usize,
) -> Result<()> {
    if theirs != ours {
        return Err(Error::Mismatch {
            me,
            peer,
            ours: *ours,
            theirs: *theirs,
        });
    }
    if len != cap {
        return Err(Error::Length {
            me,
            peer,
            fp: *ours,
            expected: cap,
            got: len,
        });
    }
    Ok(())
}

/// Handles a freshly completed header of receive `r`, whose vectored read may already have
/// put payload bytes (`r.done - HEADER_LEN`) into `r.buf`. A frame of the other stream is read
/// whole into the connection's `early` queue and the bytes read past it become the start of
/// the next frame (Note [Early frames]); an abort frame ends the exchange with its reason.
fn take_header(
    me: usize,
    c: &mut Conn,
    r: &mut RecvState<'_, '_>,
    deadline: &mut Timeout,
    aborted: &dyn Fn() -> Option<String>,
) -> Result<()> {
    loop {
        let read = r.done - HEADER_LEN;
        match frame::decode(&r.header).map_err(|source| Error::Frame {
            peer: r.peer,
            source,
        })? {
            Header::Data { fp: theirs, len }
                if point_to_point(&theirs) != point_to_point(&r.fp) =>
            {
                let mut data = r.buf[..read.min(len)].to_vec();
                let past: Vec<u8> = r.buf[len.min(read)..read].to_vec();
                if data.len() < len {
                    let have = data.len();
                    data.resize(len, 0);
                    c.read_fully(r.peer, &r.fp, &mut data[have..], deadline, aborted)?;
                }
                c.early.push_back((theirs, data));
                // What was read past that frame starts the next one.
                let h = past.len().min(HEADER_LEN);
                r.header[..h].copy_from_slice(&past[..h]);
                r.buf[..past.len() - h].copy_from_slice(&past[h..]);
                r.done = past.len();
                if r.done < HEADER_LEN {
                    return Ok(());
                }
            }
            Header::Data { fp: theirs, len } => {
                return accept(me, r.peer, &r.fp, &theirs, len, r.buf.len());
            }
            Header::Abort { len } => {
                let have = r.buf[..read.min(len)].to_vec();
                return Err(ahead::abort_reason(&mut c.stream, r.peer, have, len));
            }
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
