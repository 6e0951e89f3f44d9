//! [`TcpTransport`]: a full mesh of authenticated TCP connections between the ranks.
//!
//! Setup: every rank listens on the address chosen by [`crate::ifname::select`]; the addresses
//! are exchanged out of band (the process group uses the store); rank `i` then connects to
//! every rank `j < i` and accepts from every rank `j > i`, so each pair has exactly one
//! connection. Each connection runs the [`crate::handshake`] before any data flows.

use std::{
    io::{Read, Write},
    net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, OnceLock,
    },
    thread,
    time::{Duration, Instant},
};

use crate::{
    frame,
    handshake::{self, Hello, HELLO_FIXED, PROOF_LEN},
    tcp_exchange::{self, Background, Conn},
    Error, Fingerprint, RecvReq, Result, SendReq, Transport,
};

/// Identity and limits of this rank for mesh setup.
#[derive(Clone)]
pub struct MeshConfig {
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// Job id; peers of another job are refused.
    pub job_id: String,
    /// Job token (HMAC key); never sent.
    pub token: Vec<u8>,
    /// Progress timeout for setup and every exchange.
    pub timeout: Duration,
}

impl std::fmt::Debug for MeshConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshConfig")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("job_id", &self.job_id)
            .field("token", &"<hidden>")
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Aborts a transport from another thread (a failure watcher): wakes any blocked exchange.
#[derive(Clone, Debug, Default)]
pub struct AbortHandle {
    inner: Arc<AbortInner>,
}

#[derive(Debug, Default)]
struct AbortInner {
    reason: Mutex<Option<String>>,
    streams: Mutex<Vec<TcpStream>>,
}

impl AbortHandle {
    /// Records `reason` (the first one wins) and shuts every connection down.
    pub fn abort(&self, reason: &str) {
        {
            let mut r = self.inner.reason.lock().unwrap();
            if r.is_none() {
                *r = Some(reason.to_string());
            }
        }
        for s in self.inner.streams.lock().unwrap().iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// The abort reason, once aborted.
    pub fn reason(&self) -> Option<String> {
        self.inner.reason.lock().unwrap().clone()
    }
}

/// A full TCP mesh implementing [`Transport`].
#[derive(Debug)]
pub struct TcpTransport {
    rank: usize,
    world_size: usize,
    /// The connections, by peer: a step holds them for its duration, and the background
    /// progress between steps (Note [Background progress]).
    conns: Arc<Mutex<Vec<Option<Conn>>>>,
    /// The thread that reads peers' frames ahead between steps, once started.
    progress: Option<Background>,
    timeout: Duration,
    /// How long a wait spins before it sleeps (Note [Spin then poll]).
    spin: Duration,
    abort: AbortHandle,
}

/// Binds a listener on `ip` with an OS-chosen port.
pub fn listen(ip: IpAddr) -> Result<TcpListener> {
    TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|source| Error::Listen {
        addr: ip.to_string(),
        source,
    })
}

/// What mesh setup asks while it waits for its peers, at most every `slice` (Note [A watched
/// mesh]): `Some(reason)` when the ranks it waits for will not come.
#[derive(Clone, Copy)]
pub struct SetupWatch<'a> {
    /// How often the watch is asked.
    pub slice: Duration,
    /// The question.
    pub moot: &'a (dyn Fn() -> Option<String> + Sync),
}

// Note [A watched mesh]: a rank lost after it published its address (a fault-tolerant group
// forming while the launcher logs a node gone) leaves the others connecting to a port nobody
// listens on, or accepting a connection that never comes, each until `timeout`. With a
// `SetupWatch`, the accepting side asks between its polls and the connecting side before each
// peer and between its attempts (each bounded by `WATCHED_ATTEMPT` then, so that a partitioned
// host, whose SYNs go unanswered, is asked about too). The question costs store requests, so
// it is asked at most once a slice, by whichever side comes first, and its answer is kept: the
// other side sees it at its next look without asking. Setup then fails with
// `Error::MeshAbandoned`, naming the ranks it still waited for and the watch's reason; an error
// the connecting side meets after the answer (a handshake with a rank that gave up too) is
// reported as that answer, its cause. What the watch does not shorten: a handshake already
// under way keeps its deadline of min(timeout, 10 s), and a watch that blocks (a slow store)
// holds the side that asked it. The bootstrap's store waits are watched by the same question
// (Note [Watched waits] in phalanx-store).

/// A connect attempt's bound while setup is watched (Note [A watched mesh]).
const WATCHED_ATTEMPT: Duration = Duration::from_secs(2);

/// When a [`SetupWatch`] is next due, and its answer once it gave one, shared by the threads of
/// one setup (Note [A watched mesh]).
struct Due<'a> {
    watch: Option<SetupWatch<'a>>,
    start: Instant,
    next: Mutex<Instant>,
    answer: OnceLock<String>,
}

impl<'a> Due<'a> {
    fn new(watch: Option<SetupWatch<'a>>) -> Self {
        // At least a millisecond: the accepting side polls every 200 µs.
        let watch = watch.map(|w| SetupWatch {
            slice: w.slice.max(Duration::from_millis(1)),
            ..w
        });
        let start = Instant::now();
        let next = start + watch.map_or(Duration::ZERO, |w| w.slice);
        Due {
            watch,
            start,
            next: Mutex::new(next),
            answer: OnceLock::new(),
        }
    }

    /// Fails with the watch's answer, waiting for `missing`: the answer kept, or the one it
    /// gives now when a slice has passed since it was last asked.
    fn check(&self, missing: impl FnOnce() -> Vec<usize>) -> Result<()> {
        let Some(w) = self.watch else { return Ok(()) };
        if self.answer.get().is_none() {
            {
                let mut next = self.next.lock().unwrap();
                let now = Instant::now();
                if now < *next {
                    return Ok(());
                }
                *next = now + w.slice;
            }
            match (w.moot)() {
                Some(reason) => {
                    let _ = self.answer.set(reason);
                }
                None => return Ok(()),
            }
        }
        match self.abandoned(missing) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// [`Error::MeshAbandoned`] for `missing` once the watch has answered.
    fn abandoned(&self, missing: impl FnOnce() -> Vec<usize>) -> Option<Error> {
        let reason = self.answer.get()?;
        Some(Error::MeshAbandoned {
            missing: missing(),
            after: self.start.elapsed(),
            reason: reason.clone(),
        })
    }
}

impl TcpTransport {
    /// Builds the mesh: connects to lower ranks at `addrs[j]`, accepts higher ranks on
    /// `listener`. `addrs` holds every rank's listen address (ours included).
    pub fn connect(cfg: &MeshConfig, listener: TcpListener, addrs: &[SocketAddr]) -> Result<Self> {
        Self::connect_watched(cfg, listener, addrs, None)
    }

    /// [`connect`](Self::connect), asking `watch` while it waits (Note [A watched mesh]).
    pub fn connect_watched(
        cfg: &MeshConfig,
        listener: TcpListener,
        addrs: &[SocketAddr],
        watch: Option<SetupWatch<'_>>,
    ) -> Result<Self> {
        let me = cfg.rank;
        let due = Due::new(watch);
        let hello = Hello {
            job_id: cfg.job_id.clone(),
            rank: me as u32,
            world_size: cfg.world_size as u32,
            nonce: [0; 32],
        };
        let mut conns: Vec<Option<Conn>> = (0..cfg.world_size).map(|_| None).collect();
        // Set when connecting to a lower rank failed: the acceptor stops waiting for the
        // higher ranks, so the error (a WORLD_SIZE mismatch, say) surfaces now, not after
        // the timeout.
        let give_up = AtomicBool::new(false);
        let accepted = thread::scope(|s| -> Result<Vec<(usize, TcpStream)>> {
            let acceptor = s.spawn(|| accept_higher(cfg, &listener, &hello, &give_up, &due));
            let lower = (|| -> Result<()> {
                for (j, addr) in addrs.iter().enumerate().take(me) {
                    due.check(|| (j..me).collect())?;
                    let stream = connect_retry(*addr, j, cfg.timeout, &due, me)?;
                    let peer = run_handshake(&stream, cfg, &hello)?;
                    if peer != j {
                        return Err(Error::Handshake {
                            addr: addr.to_string(),
                            source: handshake::HandshakeError::BadJobId,
                        });
                    }
                    conns[j] = Some(prepare(stream)?);
                }
                Ok(())
            })();
            if let Err(e) = lower {
                give_up.store(true, Ordering::Relaxed);
                let _ = acceptor.join();
                // After the watch's answer, the error is its consequence: report the cause.
                let missing = || (0..me).filter(|&j| conns[j].is_none()).collect();
                return Err(match e {
                    e @ Error::MeshAbandoned { .. } => e,
                    e => due.abandoned(missing).unwrap_or(e),
                });
            }
            acceptor.join().expect("acceptor thread panicked")
        })?;
        for (j, stream) in accepted {
            conns[j] = Some(prepare(stream)?);
        }
        let abort = AbortHandle::default();
        *abort.inner.streams.lock().unwrap() = conns
            .iter()
            .flatten()
            .filter_map(|c| c.stream.try_clone().ok())
            .collect();
        Ok(TcpTransport {
            rank: me,
            world_size: cfg.world_size,
            conns: Arc::new(Mutex::new(conns)),
            progress: None,
            timeout: cfg.timeout,
            spin: tcp_exchange::SPIN,
            abort,
        })
    }

    /// A handle that aborts this transport from another thread.
    pub fn abort_handle(&self) -> AbortHandle {
        self.abort.clone()
    }

    /// Changes the progress timeout of later exchanges.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }
}

impl TcpTransport {
    /// One step of sends and receives, each with its fingerprint.
    fn run<'s, 'a: 's, 'r, 'b: 'r>(
        &mut self,
        during: &Fingerprint,
        sends: impl Iterator<Item = (Fingerprint, &'s SendReq<'a>)>,
        recvs: impl Iterator<Item = (Fingerprint, &'r mut RecvReq<'b>)>,
    ) -> Result<()> {
        if let Some(reason) = self.abort.reason() {
            return Err(Error::Aborted { reason });
        }
        let abort = self.abort.clone();
        // A poisoned lock: a thread panicked while it held the connections (a step, or the
        // background progress). They are used as they are: a frame left half read fails the
        // step that reads on by its fingerprint.
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let res = tcp_exchange::exchange(
            self.rank,
            &mut conns,
            during,
            sends,
            recvs,
            (self.timeout, self.spin),
            self.progress.is_some(),
            &move || abort.reason(),
        );
        match res {
            // A local abort shuts the sockets, which surfaces as a closed peer: report the
            // abort's reason instead, it is the root cause.
            Err(Error::PeerClosed { .. }) | Err(Error::Io { .. })
                if self.abort.reason().is_some() =>
            {
                Err(Error::Aborted {
                    reason: self.abort.reason().unwrap_or_default(),
                })
            }
            other => other,
        }
    }
}

impl Transport for TcpTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn exchange(
        &mut self,
        fp: &Fingerprint,
        sends: &[SendReq<'_>],
        recvs: &mut [RecvReq<'_>],
    ) -> Result<()> {
        self.run(
            fp,
            sends.iter().map(|s| (*fp, s)),
            recvs.iter_mut().map(|r| (*fp, r)),
        )
    }

    fn exchange_p2p(
        &mut self,
        sends: &[(Fingerprint, SendReq<'_>)],
        recvs: &mut [(Fingerprint, RecvReq<'_>)],
    ) -> Result<()> {
        let Some(during) = sends.first().map(|s| s.0).or(recvs.first().map(|r| r.0)) else {
            return Ok(());
        };
        self.run(
            &during,
            sends.iter().map(|(fp, s)| (*fp, s)),
            recvs.iter_mut().map(|(fp, r)| (*fp, r)),
        )
    }

    fn set_wait_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    fn start_progress(&mut self) -> Result<()> {
        if self.progress.is_none() {
            let background = Background::start(self.conns.clone()).map_err(|source| Error::Io {
                peer: self.rank,
                op: "start the background progress",
                source,
            })?;
            self.progress = Some(background);
        }
        Ok(())
    }

    fn abort(&mut self, reason: &str) {
        let msg = frame::encode_abort(reason);
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        for c in conns.iter_mut().flatten() {
            if c.at_frame_boundary {
                let _ = c.stream.set_nonblocking(false);
                let _ = c.stream.set_write_timeout(Some(Duration::from_millis(200)));
                let _ = c.stream.write_all(&msg);
            }
        }
        self.abort.abort(reason);
    }
}

fn prepare(stream: TcpStream) -> Result<Conn> {
    let io = |source| Error::Io {
        peer: usize::MAX,
        op: "configure socket",
        source,
    };
    stream.set_nodelay(true).map_err(io)?;
    stream.set_read_timeout(None).map_err(io)?;
    stream.set_write_timeout(None).map_err(io)?;
    stream.set_nonblocking(true).map_err(io)?;
    Ok(Conn::new(stream))
}

/// Connects to lower rank `peer` (of `me`'s lower ranks, `peer` and those after it are not
/// connected yet), retrying until `timeout` or the watch says it will not come.
fn connect_retry(
    addr: SocketAddr,
    peer: usize,
    timeout: Duration,
    due: &Due<'_>,
    me: usize,
) -> Result<TcpStream> {
    let start = Instant::now();
    let mut backoff = Duration::from_millis(5);
    let mut attempt = timeout.min(Duration::from_secs(10));
    if due.watch.is_some() {
        attempt = attempt.min(WATCHED_ATTEMPT);
    }
    loop {
        match TcpStream::connect_timeout(&addr, attempt) {
            Ok(s) => return Ok(s),
            Err(source) => {
                due.check(|| (peer..me).collect())?;
                if start.elapsed() + backoff > timeout {
                    return Err(Error::Connect {
                        peer,
                        addr: addr.to_string(),
                        source,
                    });
                }
                thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Note [Parallel handshakes]: every accepted connection runs its handshake on a thread of its
/// own, bounded by the per-connection deadline, while the acceptor goes on accepting. A silent
/// or slow stranger (or a thousand of them) then costs mesh setup nothing; before, each held
/// the acceptor for up to min(timeout, 10 s) in turn.
fn accept_higher(
    cfg: &MeshConfig,
    listener: &TcpListener,
    hello: &Hello,
    give_up: &AtomicBool,
    due: &Due<'_>,
) -> Result<Vec<(usize, TcpStream)>> {
    let expected = cfg.world_size - cfg.rank - 1;
    let mut got: Vec<(usize, TcpStream, String)> = Vec::new();
    let io = |source| Error::Listen {
        addr: format!("{:?}", listener.local_addr().ok()),
        source,
    };
    listener.set_nonblocking(true).map_err(io)?;
    let (tx, rx) = std::sync::mpsc::channel::<(Result<usize>, TcpStream, String)>();
    let start = Instant::now();
    while got.len() < expected {
        let mut idle = true;
        match listener.accept() {
            Ok((stream, addr)) => {
                idle = false;
                let _ = stream.set_nonblocking(false);
                let (tx, cfg, hello) = (tx.clone(), cfg.clone(), hello.clone());
                // Small stacks: a flood of strangers costs threads, not memory.
                let spawned = thread::Builder::new()
                    .name("phalanx-handshake".into())
                    .stack_size(128 * 1024)
                    .spawn(move || {
                        let peer = run_handshake(&stream, &cfg, &hello);
                        // The acceptor may be gone (setup done or failed): nothing to tell.
                        let _ = tx.send((peer, stream, addr.to_string()));
                    });
                if let Err(e) = spawned {
                    tracing::warn!(%addr, error = %e, "dropping connection: no thread for its handshake");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(io(e)),
        }
        while let Ok((peer, stream, addr)) = rx.try_recv() {
            idle = false;
            match peer {
                Ok(peer) if peer > cfg.rank && peer < cfg.world_size => {
                    if let Some((_, _, first)) = got.iter().find(|(p, _, _)| *p == peer) {
                        return Err(Error::DuplicateRank {
                            rank: peer,
                            first: first.clone(),
                            second: addr,
                        });
                    }
                    got.push((peer, stream, addr));
                }
                Ok(peer) => {
                    tracing::warn!(%addr, peer, "dropping connection from unexpected rank")
                }
                // A stranger or a peer without the token: drop it, keep accepting.
                Err(e) => tracing::warn!(%addr, error = %e, "dropping connection"),
            }
        }
        if got.len() >= expected || !idle {
            continue;
        }
        if give_up.load(Ordering::Relaxed) {
            return Ok(Vec::new());
        }
        let missing = || {
            (cfg.rank + 1..cfg.world_size)
                .filter(|r| !got.iter().any(|(p, _, _)| p == r))
                .collect()
        };
        if start.elapsed() > cfg.timeout {
            return Err(Error::MeshTimeout {
                missing: missing(),
                after: cfg.timeout,
            });
        }
        due.check(missing)?;
        thread::sleep(Duration::from_micros(200));
    }
    Ok(got.into_iter().map(|(p, s, _)| (p, s)).collect())
}

/// Runs the symmetric handshake on a blocking stream; returns the peer's rank.
fn run_handshake(stream: &TcpStream, cfg: &MeshConfig, hello: &Hello) -> Result<usize> {
    let addr = stream
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    let fail = |source| Error::Handshake {
        addr: addr.clone(),
        source,
    };
    let io = |source| Error::Io {
        peer: usize::MAX,
        op: "handshake",
        source,
    };
    // Bounded, so a silent or slow stranger cannot stall mesh setup.
    let limit = Some(cfg.timeout.min(Duration::from_secs(10)));
    stream.set_read_timeout(limit).map_err(io)?;
    stream.set_write_timeout(limit).map_err(io)?;
    let mut s = stream;
    let mine = Hello {
        nonce: handshake::nonce(),
        ..hello.clone()
    };
    s.write_all(&mine.encode()).map_err(io)?;
    let mut fixed = [0u8; HELLO_FIXED];
    s.read_exact(&mut fixed).map_err(io)?;
    let (mut peer, id_len) = Hello::decode_fixed(&fixed).map_err(fail)?;
    let mut id = vec![0u8; id_len];
    s.read_exact(&mut id).map_err(io)?;
    peer.job_id = String::from_utf8(id).map_err(|_| fail(handshake::HandshakeError::BadJobId))?;
    mine.check_peer(&peer).map_err(fail)?;
    s.write_all(&handshake::proof(&cfg.token, &peer.nonce, &mine))
        .map_err(io)?;
    let mut got = [0u8; PROOF_LEN];
    s.read_exact(&mut got).map_err(io)?;
    handshake::verify(&cfg.token, &mine.nonce, &peer, &got).map_err(fail)?;
    Ok(peer.rank as usize)
}
