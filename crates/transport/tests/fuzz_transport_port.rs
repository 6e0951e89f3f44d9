//! The transport's listening port under hostile input during mesh setup (the only time it
//! listens): garbage, mutated hellos, oversized job id lengths and a peer with the wrong token
//! hit rank 0's listener before rank 1 connects. Every one is dropped, the mesh still forms,
//! and data flows.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use phalanx_core::DType;
use phalanx_testing::fuzz::{mutate, Rng};
use phalanx_transport::handshake::{self, Hello};
use phalanx_transport::{tcp, CollectiveKind, Fingerprint, MeshConfig, TcpTransport, Transport};

const HOSTILE: usize = 5_000;

fn cfg(rank: usize, token: &[u8]) -> MeshConfig {
    MeshConfig {
        rank,
        world_size: 2,
        job_id: "port-test".into(),
        token: token.to_vec(),
        timeout: Duration::from_secs(20),
    }
}

/// Sends `bytes` and waits for rank 0 to close the connection (it must, for every input that
/// is not a complete hello: it answers with its own hello, then drops what fails).
fn hostile(addr: SocketAddr, bytes: &[u8]) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(bytes);
    // Half-close: a truncated hello then reads as end of file instead of a stall.
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
    }
}

#[test]
fn mesh_setup_survives_hostile_connections_and_refuses_a_wrong_token() {
    let token = b"the-job-token";
    let l0 = tcp::listen([127, 0, 0, 1].into()).unwrap();
    let l1 = tcp::listen([127, 0, 0, 1].into()).unwrap();
    let addrs = vec![l0.local_addr().unwrap(), l1.local_addr().unwrap()];
    let rank0 = {
        let addrs = addrs.clone();
        std::thread::spawn(move || TcpTransport::connect(&cfg(0, token), l0, &addrs))
    };
    // Rank 0 is accepting now: attack its listener.
    let valid = Hello {
        job_id: "port-test".into(),
        rank: 1,
        world_size: 2,
        nonce: [5; 32],
    }
    .encode();
    let mut rng = Rng::new(51);
    let start = Instant::now();
    let mut dropped = 0usize;
    for i in 0..HOSTILE {
        let bytes = match i % 4 {
            0 => {
                let n = rng.below(300);
                rng.bytes(n)
            }
            1 => {
                let mut h = valid.clone();
                mutate(&mut rng, &mut h, 400);
                h
            }
            2 => {
                let mut h = valid.clone();
                h[46..48].copy_from_slice(&u16::MAX.to_le_bytes());
                h
            }
            // A complete hello of the right job, then a proof made with the wrong token.
            _ => {
                let peer = Hello {
                    nonce: [i as u8; 32],
                    ..Hello {
                        job_id: "port-test".into(),
                        rank: 1,
                        world_size: 2,
                        nonce: [0; 32],
                    }
                };
                let mut b = peer.encode();
                b.extend_from_slice(&handshake::proof(b"wrong-token", &[0; 32], &peer));
                b
            }
        };
        if hostile(addrs[0], &bytes) {
            dropped += 1;
        }
    }
    let attack = start.elapsed();
    assert_eq!(dropped, HOSTILE, "rank 0 kept hostile connections open");
    // Now the real rank 1.
    let mut t1 = TcpTransport::connect(&cfg(1, token), l1, &addrs).expect("rank 1 joins");
    let mut t0 = rank0
        .join()
        .unwrap()
        .expect("rank 0's mesh forms after the attack");
    let fp = Fingerprint {
        seq: 0,
        kind: CollectiveKind::SendRecv,
        op: None,
        dtype: DType::U8,
        count: 4,
        root: 0,
    };
    let other = std::thread::spawn(move || {
        let mut got = [0u8; 4];
        t1.send_recv(&fp, 0, b"pong", 0, &mut got).unwrap();
        got
    });
    let mut got = [0u8; 4];
    t0.send_recv(&fp, 1, b"ping", 1, &mut got).unwrap();
    assert_eq!(&got, b"pong");
    assert_eq!(&other.join().unwrap(), b"ping");
    eprintln!("transport port: {HOSTILE} hostile connections dropped in {attack:?}; mesh formed");
}
