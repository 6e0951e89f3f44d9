//! The two-level allreduce (`PHALANX_ALGO=hierarchical`) over a real loopback TCP mesh, with
//! hosts simulated by the [`Hierarchy`] given: exact results for integer-valued data (any
//! grouping of the sum is exact), the same bits on every rank for arbitrary floats, every op,
//! uneven slices, and layouts whose hosts are not contiguous rank ranges.

#[allow(dead_code)] // shared helpers; this file needs only some
use crate::common;

use common::input;
use std::{sync::Mutex, time::Duration};

use phalanx_collectives::{allreduce, allreduce_hierarchical_shm, Algorithm, Hierarchy, Options};
use phalanx_core::ReduceOp;
use phalanx_transport::shm::{ShmGroup, ShmSegment};

fn opts(hosts: Vec<Vec<usize>>) -> Options {
    Options {
        direct_max_bytes: 0,
        chunk_bytes: 1000, // many chunks per step
        hierarchy: Some(Hierarchy::new(hosts).unwrap()),
        ..Options::default()
    }
}

#[test]
fn integer_sums_are_exact_on_every_layout() {
    let layouts = [
        vec![vec![0, 1], vec![2, 3]],
        vec![vec![0, 2], vec![1, 3]],
        vec![vec![0, 1, 2], vec![3, 4, 5]],
        vec![vec![0, 3], vec![1, 4], vec![2, 5]],
    ];
    for hosts in layouts {
        let world = hosts.iter().map(Vec::len).sum();
        let o = opts(hosts.clone());
        for count in [1usize, 5, 1000, 40_001] {
            let results = common::with_mesh(world, |rank, t| {
                let mut sum: Vec<f32> = (0..count).map(|i| (i % 97 + rank) as f32).collect();
                let a = allreduce(t, 0, &mut sum, ReduceOp::Sum, &o).unwrap();
                let mut max: Vec<i64> = (0..count)
                    .map(|i| (i * 7 + rank * 13) as i64 % 101)
                    .collect();
                allreduce(t, 1, &mut max, ReduceOp::Max, &o).unwrap();
                let mut avg: Vec<f64> = (0..count).map(|_| (2 * rank) as f64).collect();
                allreduce(t, 2, &mut avg, ReduceOp::Avg, &o).unwrap();
                (a, sum, max, avg)
            });
            let n = world;
            for (rank, (algo, sum, max, avg)) in results.into_iter().enumerate() {
                assert_eq!(algo, Algorithm::Hierarchical, "{hosts:?}");
                for i in 0..count {
                    let want = ((i % 97) * n + n * (n - 1) / 2) as f32;
                    assert_eq!(sum[i], want, "{hosts:?} count {count} rank {rank} i {i}");
                    let want = (0..n).map(|r| (i * 7 + r * 13) as i64 % 101).max().unwrap();
                    assert_eq!(max[i], want, "{hosts:?} count {count} rank {rank} i {i}");
                }
                assert!(
                    avg.iter().all(|&v| v == (n - 1) as f64),
                    "{hosts:?} avg {:?}",
                    &avg[..1]
                );
            }
        }
    }
}

#[test]
fn float_results_are_identical_on_every_rank_and_close_to_the_flat_ring() {
    let hosts = vec![vec![0, 1], vec![2, 3]];
    let o = opts(hosts);
    let count = 100_003;
    let results = common::with_mesh(4, |rank, t| {
        let mut h = input::<f32>(rank, count, 9);
        allreduce(t, 0, &mut h, ReduceOp::Sum, &o).unwrap();
        let mut flat = input::<f32>(rank, count, 9);
        let ring = Options {
            direct_max_bytes: 0,
            ..Options::default()
        };
        allreduce(t, 1, &mut flat, ReduceOp::Sum, &ring).unwrap();
        (h, flat)
    });
    for (h, flat) in &results {
        assert!(
            bytemuck::cast_slice::<f32, u8>(h) == bytemuck::cast_slice::<f32, u8>(&results[0].0),
            "ranks disagree"
        );
        for (a, b) in h.iter().zip(flat) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }
}

#[test]
fn a_hierarchy_for_another_world_size_is_ignored() {
    let o = opts(vec![vec![0, 1], vec![2, 3]]);
    let algos = common::with_mesh(3, |rank, t| {
        let mut v = vec![rank as f32; 70_000];
        allreduce(t, 0, &mut v, ReduceOp::Sum, &o).unwrap()
    });
    assert!(algos.iter().all(|a| *a == Algorithm::Ring), "{algos:?}");
}

/// Each simulated host's ranks share memory (segments of 4 KiB buffers, so every phase runs in
/// many chunks); hosts reach each other over the TCP mesh.
#[test]
fn shared_memory_inside_hosts_gives_exact_sums_and_equal_bits() {
    const BUFFER: usize = 4096;
    for hosts in [
        vec![vec![0, 1], vec![2, 3]],
        vec![vec![0, 3], vec![1, 4], vec![2, 5]],
    ] {
        let world: usize = hosts.iter().map(Vec::len).sum();
        let o = opts(hosts.clone());
        let h = o.hierarchy.clone().unwrap();
        let job = format!("phalanx-test-hier-{}-{world}", std::process::id());
        let bytes = ShmGroup::segment_bytes(BUFFER);
        let own: Mutex<Vec<Option<ShmSegment>>> = Mutex::new(
            (0..world)
                .map(|r| Some(ShmSegment::create(&format!("{job}-{r}"), bytes).unwrap()))
                .collect(),
        );
        let results = common::with_mesh(world, |rank, t| {
            let (members, local) = h.host_of(rank);
            let mine = own.lock().unwrap()[rank].take().unwrap();
            let peers = members
                .iter()
                .map(|&p| {
                    (p != rank).then(|| ShmSegment::open(&format!("{job}-{p}"), bytes).unwrap())
                })
                .collect();
            let mut g =
                ShmGroup::new(local, members.len(), mine, peers, Duration::from_secs(20)).unwrap();
            let mut out = Vec::new();
            for (seq, count) in [1usize, 7, 5000, 100_003].into_iter().enumerate() {
                let mut sum: Vec<f32> = (0..count).map(|i| (i % 97 + rank) as f32).collect();
                let a = allreduce_hierarchical_shm(
                    t,
                    &mut g,
                    3 * seq as u64,
                    &mut sum,
                    ReduceOp::Sum,
                    &o,
                )
                .unwrap();
                let mut avg: Vec<f64> = (0..count).map(|_| (2 * rank) as f64).collect();
                allreduce_hierarchical_shm(
                    t,
                    &mut g,
                    3 * seq as u64 + 1,
                    &mut avg,
                    ReduceOp::Avg,
                    &o,
                )
                .unwrap();
                let mut float = input::<f32>(rank, count, 5);
                allreduce_hierarchical_shm(
                    t,
                    &mut g,
                    3 * seq as u64 + 2,
                    &mut float,
                    ReduceOp::Sum,
                    &o,
                )
                .unwrap();
                out.push((a, sum, avg, float));
            }
            out
        });
        let n = world;
        for (rank, per_count) in results.iter().enumerate() {
            for (k, (algo, sum, avg, float)) in per_count.iter().enumerate() {
                let count = sum.len();
                let big = count * 4 > o.direct_max_bytes;
                assert_eq!(
                    *algo == Algorithm::Hierarchical,
                    big,
                    "{hosts:?} count {count}: {algo:?}"
                );
                for (i, v) in sum.iter().enumerate() {
                    assert_eq!(
                        *v,
                        ((i % 97) * n + n * (n - 1) / 2) as f32,
                        "{hosts:?} rank {rank} i {i}"
                    );
                }
                assert!(
                    avg.iter().all(|&v| v == (n - 1) as f64),
                    "{hosts:?} rank {rank}"
                );
                assert!(
                    bytemuck::cast_slice::<f32, u8>(float)
                        == bytemuck::cast_slice::<f32, u8>(&results[0][k].3),
                    "{hosts:?}: rank {rank} differs from rank 0 at count {count}"
                );
            }
        }
    }
}
