//! A thread that reads the peers' frames ahead while no step runs (Note [Background progress]).
//!
//! Note [Background progress]: a point-to-point send completes once its peer waits in a
//! point-to-point step (Note [Sends that read]), not while the peer computes, nor while it
//! waits in a collective of another group. A pipeline stage whose compute runs collectives of
//! another group (tensor parallelism's all-reduces, a fully sharded block's all-gather) could
//! then wait in a send for a peer that waits in such a collective for a rank that waits in a
//! send to this rank's partner: a chain of waits across groups that comes back to this rank.
//! Gloo and NCCL break such chains with a thread that moves their bytes whatever the caller
//! does. So can a transport here, once [`crate::Transport::start_progress`] is called: a thread
//! sleeps in `poll(2)` on every connection and, when one has bytes while no step holds the
//! connections, reads whole frames from it into its `early` queue, as a waiting step would (a
//! frame begun stays in its connection, and the next reader finishes it first). So every send
//! to this rank completes while it computes or waits in another group. A step of this group
//! holds the connections meanwhile; its collective steps then read ahead as its point-to-point
//! steps do, once they have spun (a small exchange's spin reads nothing more), so a send to
//! this rank completes whatever it does. The next step finishes a frame the thread began. A peer's abort frame or a damaged frame found
//! there is kept in its connection, and the next step that sends to or receives from that
//! peer (any point-to-point step, which reads ahead from all) reports it; the link is read no
//! more. It costs a wake-up per frame that arrives while no step runs, and the wait for the
//! lock when a step starts while the thread reads (non-blocking reads of what has arrived,
//! except the rest of a peer's abort frame, read for up to a second), so it is for groups whose
//! messages are few and large (a pipeline's), not for a group of small collectives.

use std::{
    os::fd::{AsRawFd, RawFd},
    sync::{Arc, Mutex},
    thread::JoinHandle,
};

use super::conn::Conn;

/// The background progress of one transport: stopped and joined on drop.
#[derive(Debug)]
pub(crate) struct Background {
    /// An eventfd the thread polls with the connections: written once to stop it.
    stop: RawFd,
    thread: Option<JoinHandle<()>>,
}

impl Background {
    /// Starts the thread over `conns` (the connections never change after the mesh is set up).
    pub(crate) fn start(conns: Arc<Mutex<Vec<Option<Conn>>>>) -> std::io::Result<Background> {
        // SAFETY: eventfd(2) with valid flags; the descriptor is closed on drop.
        let stop = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if stop < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fds: Vec<(usize, RawFd)> = conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .enumerate()
            .filter_map(|(peer, c)| c.as_ref().map(|c| (peer, c.stream.as_raw_fd())))
            .collect();
        let thread = std::thread::Builder::new()
            .name("phalanx-progress".into())
            .spawn(move || run(&conns, &fds, stop));
        match thread {
            Ok(thread) => Ok(Background {
                stop,
                thread: Some(thread),
            }),
            Err(e) => {
                // SAFETY: closing the eventfd made above, which nothing else holds.
                unsafe { libc::close(stop) };
                Err(e)
            }
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let one: u64 = 1;
        // SAFETY: an 8-byte write to the eventfd this owns.
        unsafe { libc::write(self.stop, (&one as *const u64).cast(), 8) };
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // SAFETY: the thread that polled it has ended.
        unsafe { libc::close(self.stop) };
    }
}

/// The thread: sleeps until a connection has bytes (or `stop` is written), then reads ahead
/// from every such connection under the lock. A connection whose peer ended, or where
/// something was found to report, is no longer polled.
fn run(conns: &Mutex<Vec<Option<Conn>>>, fds: &[(usize, RawFd)], stop: RawFd) {
    let mut live: Vec<bool> = vec![true; fds.len()];
    loop {
        let mut polled: Vec<libc::pollfd> = vec![libc::pollfd {
            fd: stop,
            events: libc::POLLIN,
            revents: 0,
        }];
        let mut peers = Vec::with_capacity(fds.len());
        for (i, &(peer, fd)) in fds.iter().enumerate().filter(|&(i, _)| live[i]) {
            polled.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            peers.push((i, peer));
        }
        // SAFETY: `polled` is a valid array of pollfd for the duration of the call; the
        // connections' descriptors stay open until this thread is joined.
        let rc = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) };
        if rc < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if polled[0].revents != 0 {
            return;
        }
        let ready: Vec<(usize, usize)> = polled[1..]
            .iter()
            .zip(&peers)
            .filter(|(p, _)| p.revents != 0)
            .map(|(_, &ip)| ip)
            .collect();
        if ready.is_empty() {
            continue;
        }
        // Waits for a step that holds the connections to end: it may read these bytes itself.
        let mut conns = conns.lock().unwrap_or_else(|e| e.into_inner());
        for (i, peer) in ready {
            let Some(c) = conns[peer].as_mut() else {
                live[i] = false;
                continue;
            };
            if c.failed.is_some() || c.ahead.ended {
                live[i] = false;
                continue;
            }
            if let Err(e) = c.read_ahead(peer) {
                // Nothing more is read from this link: the next step that uses it reports
                // the error, and any step after that finds the link ended.
                c.failed = Some(e);
                c.ahead.ended = true;
            }
            live[i] = c.failed.is_none() && !c.ahead.ended;
        }
    }
}
