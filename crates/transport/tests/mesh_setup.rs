//! Mesh setup when peers misbehave or vanish.
//!
//! - 1,000 silent connections to a rank's listener (Note [Parallel handshakes]): each
//!   handshake has a deadline of its own and runs beside the others, so the real peer's
//!   connection is not queued behind them. Setup takes far less than one per-connection
//!   deadline; handled one after another, they would hold it 1,000 deadlines.
//! - A rank that published its address and died before connecting (Note [A watched mesh]): with
//!   a watch, the others stop at its word, naming the rank, instead of at the timeout.

use std::net::{SocketAddr, TcpStream};
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

/// Ranks 0, 1 and 3 of 4 set up while rank 2, whose address they hold, is gone (its listener
/// closed: its port refuses). Ranks 0 and 1 wait to accept it, rank 3 retries connecting to
/// it; their watch says "gone" after 3 s (the three connect among themselves long before,
/// even beside the other test's thousand strangers), and each stops within a few slices with
/// rank 2 among those it waited for and the watch's reason, not after the 60 s timeout. (A
/// refused port fails each attempt at once: the attempt's bound for a partitioned host, whose
/// SYNs go unanswered, is not what this exercises.)
#[test]
fn a_watched_setup_stops_waiting_for_a_rank_its_watch_says_is_gone() {
    let mut listeners: Vec<_> = (0..4)
        .map(|_| Some(tcp::listen([127, 0, 0, 1].into()).unwrap()))
        .collect();
    let addrs: Vec<SocketAddr> = listeners
        .iter()
        .map(|l| l.as_ref().unwrap().local_addr().unwrap())
        .collect();
    drop(listeners[2].take());
    let start = Instant::now();
    let gone = Duration::from_secs(3);
    let moot = move || {
        (start.elapsed() >= gone).then(|| "slot 2 left in generation 1 (the launcher)".to_string())
    };
    let cfg4 = |rank| MeshConfig {
        world_size: 4,
        ..cfg(rank)
    };
    let ended = std::thread::scope(|s| {
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
    });
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
        // The watch answers at 3 s; a slice is 0.2 s and a connect attempt at most 2 s.
        assert!(
            after < Duration::from_secs(20),
            "rank {rank} stopped after {after:?} (timeout {TIMEOUT:?})"
        );
    }
}
