//! Mesh setup when peers misbehave or vanish.
//!
//! - 1,000 silent connections to a rank's listener (Note [Parallel handshakes]): each
//!   handshake has a deadline of its own and runs beside the others, so the real peer's
//!   connection is not queued behind them. Setup takes far less than one per-connection
//!   deadline; handled one after another, they would hold it 1,000 deadlines.
//! - A rank that published its address and died before connecting, its port closed or its host
//!   silent (Note [A watched mesh]): with a watch, the others stop at its word, naming the
//!   rank, instead of at the timeout.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use phalanx_core::DType;
use phalanx_transport::{
    tcp, CollectiveKind, Error, Fingerprint, MeshConfig, SetupWatch, TcpTransport, Transport,
};

const STRANGERS: usize = 1_000;
/// Mesh setup's bound (long enough to open the strangers' connections first).
const TIMEOUT: Duration = Duration::from_secs(60);
/// One handshake's deadline: min(timeout, 10 s).
const DEADLINE: Duration = Duration::from_secs(10);

fn cfg(rank: usize) -> MeshConfig {
    MeshConfig {
        rank,
        world_size: 2,
        job_id: "silent".into(),
        token: b"token".to_vec(),
        timeout: TIMEOUT,
    }
}

#[test]
fn a_thousand_silent_connections_do_not_delay_mesh_setup() {
    let l0 = tcp::listen([127, 0, 0, 1].into()).unwrap();
    let l1 = tcp::listen([127, 0, 0, 1].into()).unwrap();
    let addrs: Vec<SocketAddr> = vec![l0.local_addr().unwrap(), l1.local_addr().unwrap()];
    let a0 = addrs.clone();
    // Rank 0 accepts from here on.
    let rank0 = std::thread::spawn(move || TcpTransport::connect(&cfg(0), l0, &a0));
    // Strangers connect and say nothing; they stay open until the end of the test.
    let silent: Vec<TcpStream> = (0..STRANGERS)
        .filter_map(|_| TcpStream::connect_timeout(&addrs[0], Duration::from_secs(2)).ok())
        .collect();
    assert!(
        silent.len() >= STRANGERS * 9 / 10,
        "only {} connected",
        silent.len()
    );
    // Then the real peer.
    let start = Instant::now();
    let mut t1 = TcpTransport::connect(&cfg(1), l1, &addrs).expect("rank 1 joins");
    let mut t0 = rank0.join().unwrap().expect("rank 0 joins");
    let setup = start.elapsed();
    assert!(
        setup < DEADLINE,
        "mesh setup took {setup:?} with {} silent connections; one handshake deadline is {DEADLINE:?}",
        silent.len()
    );
    // And data flows.
    let fp = Fingerprint {
        seq: 0,
        kind: CollectiveKind::SendRecv,
        op: None,
        dtype: DType::U8,
        count: 3,
        root: 0,
    };
    let sender = std::thread::spawn(move || t0.send(&fp, 1, b"abc").map(|()| t0));
    let mut buf = [0u8; 3];
    t1.recv(&fp, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"abc");
    sender.join().unwrap().unwrap();
    drop(silent);
}

/// When the watch of ranks 0, 1 and 3 of 4 says rank 2 is gone.
const GONE: Duration = Duration::from_secs(3);

/// Ranks 0, 1 and 3 of 4 set up, with a watch that says "gone" after [`GONE`], while rank 2,
/// whose address they hold, never joins: `rank2` is its listener, or `None` for a closed port.
/// Ranks 0 and 1 wait to accept it, rank 3 connects to it. Each rank's outcome and when it
/// ended, from the start.
fn set_up_without_rank_2(rank2: Option<TcpListener>) -> Vec<(usize, Result<(), Error>, Duration)> {
    let mut listeners: Vec<_> = (0..4)
        .map(|_| Some(tcp::listen([127, 0, 0, 1].into()).unwrap()))
        .collect();
    listeners[2] = rank2;
    let addrs: Vec<SocketAddr> = listeners
        .iter()
        .map(|l| match l {
            Some(l) => l.local_addr().unwrap(),
            // A port nobody listens on any more.
            None => {
                let closed = tcp::listen([127, 0, 0, 1].into()).unwrap();
                closed.local_addr().unwrap()
            }
        })
        .collect();
    let start = Instant::now();
    let moot = move || {
        (start.elapsed() >= GONE).then(|| "slot 2 left in generation 1 (the launcher)".to_string())
    };
    let cfg4 = |rank| MeshConfig {
        world_size: 4,
        ..cfg(rank)
    };
    std::thread::scope(|s| {
        let ranks: Vec<_> = [0, 1, 3]
            .into_iter()
            .map(|rank| {
                let l = listeners[rank].take().unwrap();
                let (addrs, moot, cfg4) = (&addrs, &moot, &cfg4);
                s.spawn(move || {
                    let watch = SetupWatch {
                        slice: Duration::from_millis(200),
                        moot,
                    };
                    let got = TcpTransport::connect_watched(&cfg4(rank), l, addrs, Some(watch));
                    (rank, got.map(|_| ()), start.elapsed())
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    })
}

/// Each rank stopped with rank 2 among those it waited for and the watch's reason, before
/// `bound`.
fn all_abandoned_rank_2(ended: Vec<(usize, Result<(), Error>, Duration)>, bound: Duration) {
    for (rank, got, after) in ended {
        match got {
            Err(Error::MeshAbandoned {
                missing, reason, ..
            }) => {
                assert!(missing.contains(&2), "rank {rank} waited for {missing:?}");
                assert!(reason.contains("slot 2 left"), "rank {rank}: {reason}");
            }
            other => panic!("rank {rank}: expected MeshAbandoned, got {other:?}"),
        }
        assert!(
            after < bound,
            "rank {rank} stopped after {after:?}, the watch answered at {GONE:?} (timeout {TIMEOUT:?})"
        );
    }
}

/// Rank 2 gone, its port closed (it refuses): ranks 0 and 1 wait to accept it, rank 3 retries
/// connecting to it. The three connect among themselves long before the watch answers, even
/// beside the other tests' thousand strangers, and each stops within a few slices of the
/// answer (a slice is 0.2 s), not after the 60 s timeout.
#[test]
fn a_watched_setup_stops_waiting_for_a_rank_its_watch_says_is_gone() {
    all_abandoned_rank_2(set_up_without_rank_2(None), GONE + Duration::from_secs(15));
}

/// Rank 2's host does not answer, as across a cut link: its listener is open but its backlog
/// is full, so the kernel drops rank 3's SYNs and each connect attempt lasts its whole bound.
/// Watched, an attempt lasts at most 2 s (`WATCHED_ATTEMPT`) and rank 3 asks between them; an
/// unwatched attempt's bound, min(timeout, 10 s), would hold it 10 s.
#[test]
fn a_watched_connect_to_a_host_that_does_not_answer_stops_within_an_attempt_of_the_answer() {
    let rank2 = tcp::listen([127, 0, 0, 1].into()).unwrap();
    let addr = rank2.local_addr().unwrap();
    let mut backlog = Vec::new();
    while let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
        backlog.push(s);
        assert!(
            backlog.len() < 100_000,
            "the backlog of {addr} never filled"
        );
    }
    // 2 s of the answer's attempt, plus slack; an unwatched attempt would end at 10 s.
    all_abandoned_rank_2(
        set_up_without_rank_2(Some(rank2)),
        GONE + Duration::from_secs(4),
    );
    drop(backlog);
}
