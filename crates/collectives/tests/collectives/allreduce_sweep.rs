//! Sweeps world sizes × counts × ops × dtypes, checking every result bitwise against a
//! sequential fold in the canonical order, and that direct exchange and ring agree.

use crate::common;

use common::{expected, input};

use half::{bf16, f16};
use phalanx_collectives::{
    allgather, allreduce, barrier, broadcast, reduce_scatter, Algorithm, Options,
};
use phalanx_core::{Element, ReduceOp};

const WORLDS: [usize; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
const COUNTS: [usize; 6] = [0, 1, 2, 7, 1000, 40_001];

fn sweep<T: Element>() {
    let direct = Options {
        direct_max_bytes: usize::MAX,
        ..Options::default()
    };
    // Small chunks so that the ring's chunking and uneven segments are exercised.
    let ring = Options {
        direct_max_bytes: 0,
        chunk_bytes: 1000,
        ..Options::default()
    };
    for world in WORLDS {
        let failures = common::with_mesh(world, |rank, t| {
            let mut seq = 0;
            let mut bad = Vec::new();
            for count in COUNTS {
                for op in ReduceOp::ALL {
                    let want = expected::<T>(world, count, op, seq);
                    for opts in [&direct, &ring] {
                        let mut buf = input::<T>(rank, count, seq);
                        let algo = allreduce(t, seq, &mut buf, op, opts).unwrap();
                        if world > 1 && count > 0 {
                            let expect_algo = if opts.direct_max_bytes == 0 {
                                Algorithm::Ring
                            } else {
                                Algorithm::Direct
                            };
                            assert_eq!(algo, expect_algo);
                        }
                        if bytemuck::cast_slice::<T, u8>(&buf)
                            != bytemuck::cast_slice::<T, u8>(&want)
                        {
                            bad.push(format!(
                                "world {world} count {count} {op} {:?} rank {rank}",
                                opts.direct_max_bytes
                            ));
                        }
                    }
                    seq += 1;
                }
            }
            bad
        });
        let failures: Vec<_> = failures.into_iter().flatten().collect();
        assert!(
            failures.is_empty(),
            "{} {:?}",
            T::DTYPE,
            &failures[..failures.len().min(10)]
        );
    }
}

#[test]
fn allreduce_f32() {
    sweep::<f32>();
}
#[test]
fn allreduce_f64() {
    sweep::<f64>();
}
#[test]
fn allreduce_bf16() {
    sweep::<bf16>();
}
#[test]
fn allreduce_f16() {
    sweep::<f16>();
}
#[test]
fn allreduce_i32() {
    sweep::<i32>();
}
#[test]
fn allreduce_i64() {
    sweep::<i64>();
}

#[test]
fn broadcast_allgather_reduce_scatter_barrier() {
    for world in WORLDS {
        common::with_mesh(world, |rank, t| {
            let mut seq = 0;
            for count in COUNTS {
                for root in [0, world - 1, world / 2] {
                    for opts in [
                        Options::default(),
                        Options {
                            direct_max_bytes: 0,
                            chunk_bytes: 1000,
                            ..Options::default()
                        },
                    ] {
                        let mut buf: Vec<f32> = if rank == root {
                            input(root, count, 9)
                        } else {
                            vec![0.0; count]
                        };
                        broadcast(t, seq, &mut buf, root, &opts).unwrap();
                        assert_eq!(
                            buf,
                            input::<f32>(root, count, 9),
                            "broadcast world {world} count {count} root {root}"
                        );
                        seq += 1;
                    }
                }
                let per = count.min(1000);
                let mine: Vec<i64> = input(rank, per, 3);
                let mut all = vec![0i64; per * world];
                allgather(
                    t,
                    seq,
                    &mine,
                    &mut all,
                    &Options {
                        chunk_bytes: 256,
                        ..Options::default()
                    },
                )
                .unwrap();
                for p in 0..world {
                    assert_eq!(
                        &all[p * per..(p + 1) * per],
                        &input::<i64>(p, per, 3)[..],
                        "allgather block {p}"
                    );
                }
                seq += 1;
                let mut send: Vec<f64> = input(rank, per * world, 5);
                let mut got = vec![0f64; per];
                reduce_scatter(
                    t,
                    seq,
                    &mut send,
                    &mut got,
                    ReduceOp::Sum,
                    &Options::default(),
                )
                .unwrap();
                for (i, g) in got.iter().enumerate() {
                    let want: f64 = (0..world)
                        .map(|p| input::<f64>(p, per * world, 5)[rank * per + i])
                        .sum();
                    assert!(
                        (g - want).abs() < 1e-9,
                        "reduce_scatter world {world} elem {i}"
                    );
                }
                seq += 1;
                barrier(t, seq).unwrap();
                seq += 1;
            }
        });
    }
}
