//! Thread-level harness: `world` ranks as threads over a loopback TCP mesh.
#![allow(unreachable_pub)] // shared by several test crates, where `pub` is the point

use std::{net::SocketAddr, time::Duration};

use phalanx_transport::{tcp, MeshConfig, TcpTransport};

/// Runs `f(rank, transport)` on `world` threads and returns their results in rank order.
pub fn with_mesh<R: Send>(
    world: usize,
    f: impl Fn(usize, &mut TcpTransport) -> R + Sync,
) -> Vec<R> {
    let listeners: Vec<_> = (0..world)
        .map(|_| tcp::listen([127, 0, 0, 1].into()).unwrap())
        .collect();
    let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(rank, listener)| {
                let (addrs, f) = (addrs.clone(), &f);
                s.spawn(move || {
                    let cfg = MeshConfig {
                        rank,
                        world_size: world,
                        job_id: "test".into(),
                        token: b"t".to_vec(),
                        // Deadline for every exchange: a broken algorithm fails, never hangs.
                        timeout: Duration::from_secs(20),
                    };
                    let mut t = TcpTransport::connect(&cfg, listener, &addrs).unwrap();
                    f(rank, &mut t)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
