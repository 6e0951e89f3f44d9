//! Thread-level harness: `world` ranks as threads over a loopback TCP mesh.
#![allow(unreachable_pub)] // shared by the modules of the test binary, where `pub` is the point

use std::{net::SocketAddr, time::Duration};

use phalanx_collectives::{kernels::reduce_into, segments};
use phalanx_core::{Element, ReduceOp};
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

/// Deterministic, rank-dependent values that make rounding order visible for floats but
/// stay small enough that products do not overflow to infinity everywhere.
pub fn input<T: Element>(rank: usize, count: usize, salt: u64) -> Vec<T> {
    (0..count)
        .map(|i| {
            let h = (i as u64 ^ salt)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(rank as u64 * 0x1234_5678_9ABC);
            let x = ((h >> 40) % 2001) as f64 / 1000.0 - 1.0; // [-1, 1]
            T::from_f64(x * 3.7 + 0.1 * rank as f64)
        })
        .collect()
}

/// The result every rank must hold: a sequential fold in the canonical order.
pub fn expected<T: Element>(world: usize, count: usize, op: ReduceOp, salt: u64) -> Vec<T> {
    let xs: Vec<Vec<T>> = (0..world).map(|r| input(r, count, salt)).collect();
    let mut out = vec![T::zeroed(); count];
    for s in 0..world {
        let seg = segments::segment(count, world, s);
        let mut order = segments::canonical_order(world, s);
        out[seg.clone()].copy_from_slice(&xs[order.next().unwrap()][seg.clone()]);
        for p in order {
            reduce_into(op, &mut out[seg.clone()], &xs[p][seg.clone()]);
        }
    }
    phalanx_collectives::kernels::finish(op, &mut out, world);
    out
}
