//! 1,000 silent connections to a rank's listener during mesh setup (Note [Parallel
//! handshakes]): each handshake has a deadline of its own and runs beside the others, so the
//! real peer's connection is not queued behind them. Setup takes far less than one
//! per-connection deadline; handled one after another, they would hold it 1,000 deadlines.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use phalanx_core::DType;
use phalanx_transport::{tcp, CollectiveKind, Fingerprint, MeshConfig, TcpTransport, Transport};

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
