//! Sweeps of the collectives beyond allreduce (reduce, reduce_scatter, gather, scatter, all_to_all with equal
//! and unequal splits, allgather_v, the asynchronous forms, the object collectives): worlds
//! 1–8 × counts including 0, 1 and odd ones × dtypes × ops, over shared memory and over TCP,
//! each result compared element by element with a reference computed here.

use phalanx_core::{Element, ReduceOp};
use phalanx_pg::ProcessGroup;
use phalanx_testing::{spawn_ranks, spawn_ranks_tcp};

const WORLDS: [usize; 6] = [1, 2, 3, 4, 5, 8];
/// 0, 1, odd, and one above the direct-exchange limit (64 KiB of f32) for the ring paths.
const COUNTS: [usize; 5] = [0, 1, 7, 1001, 20_011];
const OPS: [ReduceOp; 5] = [
    ReduceOp::Sum,
    ReduceOp::Avg,
    ReduceOp::Min,
    ReduceOp::Max,
    ReduceOp::Product,
];

/// Rank `r`'s element `i`: small integers, so every fold order gives the same exact value.
fn value<T: Element>(r: usize, i: usize) -> T {
    T::from_f64(((r * 7 + i * 3) % 3 + 1) as f64)
}

fn input<T: Element>(r: usize, count: usize) -> Vec<T> {
    (0..count).map(|i| value(r, i)).collect()
}

/// The reduction of every rank's input, folded serially.
fn reference<T: Element>(n: usize, count: usize, op: ReduceOp) -> Vec<T> {
    (0..count)
        .map(|i| {
            let v = (1..n).fold(value::<T>(0, i), |acc, r| T::reduce(op, acc, value(r, i)));
            if op == ReduceOp::Avg {
                v.div_world(n)
            } else {
                v
            }
        })
        .collect()
}

fn reduce_all<T: Element + std::fmt::Debug>(pg: &ProcessGroup) -> usize {
    let (n, r) = (pg.world_size(), pg.rank());
    let mut checked = 0;
    for count in COUNTS {
        for op in OPS {
            for root in [0, n - 1] {
                let mut buf = input::<T>(r, count);
                pg.reduce(&mut buf, op, root).unwrap();
                if r == root {
                    let want = reference::<T>(n, count, op);
                    for (i, (g, w)) in buf.iter().zip(&want).enumerate() {
                        assert_eq!(
                            g.to_f64(),
                            w.to_f64(),
                            "reduce {op:?} {} n={n} count={count} root={root} at {i}",
                            std::any::type_name::<T>()
                        );
                    }
                    checked += 1;
                }
            }
            // reduce_scatter: rank r keeps block r of the reduction of everyone's n blocks.
            let mut send = input::<T>(r, n * count);
            let mut recv = vec![T::from_f64(0.0); count];
            pg.reduce_scatter(&mut send, &mut recv, op).unwrap();
            let want = reference::<T>(n, n * count, op);
            for (i, (g, w)) in recv.iter().zip(&want[r * count..]).enumerate() {
                assert_eq!(
                    g.to_f64(),
                    w.to_f64(),
                    "reduce_scatter {op:?} {} n={n} count={count} at {i}",
                    std::any::type_name::<T>()
                );
            }
            checked += 1;
        }
    }
    checked
}

fn reduces(pg: ProcessGroup) -> usize {
    reduce_all::<f32>(&pg)
        + reduce_all::<f64>(&pg)
        + reduce_all::<i32>(&pg)
        + reduce_all::<i64>(&pg)
        + reduce_all::<u8>(&pg)
}

#[test]
fn reduce_matches_a_serial_fold_for_every_world_count_dtype_and_op() {
    for n in WORLDS {
        let checked: usize = spawn_ranks(n, reduces).into_iter().sum();
        assert!(checked > 0, "world {n}");
        let checked: usize = spawn_ranks_tcp(n, reduces).into_iter().sum();
        assert!(checked > 0, "world {n}");
    }
}

fn bitwise_all<T: Element + std::fmt::Debug>(pg: &ProcessGroup) {
    let (n, r) = (pg.world_size(), pg.rank());
    for count in COUNTS {
        for op in [ReduceOp::BAnd, ReduceOp::BOr, ReduceOp::BXor] {
            let want = reference::<T>(n, count, op);
            let mut buf = input::<T>(r, count);
            pg.allreduce(&mut buf, op).unwrap();
            assert_eq!(buf, want, "allreduce {op} n={n} count={count}");
            let mut buf = input::<T>(r, count);
            pg.reduce(&mut buf, op, 0).unwrap();
            if r == 0 {
                assert_eq!(buf, want, "reduce {op} n={n} count={count}");
            }
            let mut send: Vec<T> = (0..n).flat_map(|_| input::<T>(r, count)).collect();
            let mut recv = vec![T::from_f64(0.0); count];
            pg.reduce_scatter(&mut send, &mut recv, op).unwrap();
            assert_eq!(recv, want, "reduce_scatter {op} n={n} count={count}");
        }
    }
}

#[test]
fn bitwise_ops_reduce_integers_and_refuse_floats() {
    for n in [1, 2, 3, 5] {
        let check = |pg: ProcessGroup| {
            bitwise_all::<i32>(&pg);
            bitwise_all::<i64>(&pg);
            bitwise_all::<u8>(&pg);
            let e = pg
                .allreduce(&mut [1f32; 3], ReduceOp::BXor)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(
                    "bxor is a bitwise op, defined on integer dtypes (i32, i64, u8), not f32"
                ),
                "{e}"
            );
            // The refusal broke nothing: the group goes on.
            let mut x = [1i32 << pg.rank()];
            pg.allreduce(&mut x, ReduceOp::BOr).unwrap();
            x[0]
        };
        let full = (1i32 << n) - 1;
        assert_eq!(spawn_ranks(n, check), vec![full; n]);
        assert_eq!(spawn_ranks_tcp(n, check), vec![full; n]);
    }
}

fn premul<T: Element + std::fmt::Debug>(pg: &ProcessGroup) {
    let (n, r) = (pg.world_size(), pg.rank());
    for count in COUNTS {
        for factor in [0.5, 1.0 / 3.0, -2.25] {
            let ty = std::any::type_name::<T>();
            // Bitwise: the sum of the inputs scaled in T.
            let f = T::from_f64(factor).to_f64();
            let scale = |v: Vec<T>| -> Vec<T> {
                v.into_iter().map(|x| T::from_f64(x.to_f64() * f)).collect()
            };
            let mut want = scale(input::<T>(r, count));
            pg.allreduce(&mut want, ReduceOp::Sum).unwrap();
            let mut got = input::<T>(r, count);
            pg.allreduce_premul_sum(&mut got, factor).unwrap();
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(g, w)| g.to_f64().to_bits() == w.to_f64().to_bits()),
                "premul_sum {ty} n={n} count={count} factor={factor}"
            );
            // And it is factor × the sum of the inputs, to the type's precision.
            let tol = if std::mem::size_of::<T>() == 2 {
                0.1
            } else {
                1e-3
            };
            let inputs: Vec<Vec<T>> = (0..n).map(|p| input::<T>(p, count)).collect();
            for (i, g) in got.iter().enumerate() {
                let exact: f64 = inputs.iter().map(|x| x[i].to_f64() * f).sum();
                assert!(
                    (g.to_f64() - exact).abs() <= tol * exact.abs().max(1.0),
                    "premul_sum {ty} n={n} at {i}: {} vs {exact}",
                    g.to_f64()
                );
            }
            let mut send = input::<T>(r, n * count);
            let mut recv = vec![T::from_f64(0.0); count];
            pg.reduce_scatter_premul_sum(&mut send, &mut recv, factor)
                .unwrap();
            let mut want = scale(input::<T>(r, n * count));
            let mut block = vec![T::from_f64(0.0); count];
            pg.reduce_scatter(&mut want, &mut block, ReduceOp::Sum)
                .unwrap();
            assert!(
                recv.iter()
                    .zip(&block)
                    .all(|(g, w)| g.to_f64().to_bits() == w.to_f64().to_bits()),
                "reduce_scatter premul_sum {ty} n={n} count={count}"
            );
        }
    }
}

#[test]
fn premul_sum_scales_then_sums_and_refuses_integers() {
    for n in [1, 2, 3, 4] {
        let check = |pg: ProcessGroup| {
            premul::<f32>(&pg);
            premul::<f64>(&pg);
            premul::<half::bf16>(&pg);
            premul::<half::f16>(&pg);
            let e = pg
                .allreduce_premul_sum(&mut [1i32; 3], 0.5)
                .unwrap_err()
                .to_string();
            assert!(e.contains("PREMUL_SUM") && e.contains("not i32"), "{e}");
            let mut send = [1f32; 3];
            let e = pg
                .reduce_scatter_premul_sum(&mut send, &mut [0f32; 5], 0.5)
                .unwrap_err()
                .to_string();
            assert!(e.contains("send holds 3 elements"), "{e}");
            assert_eq!(send, [1f32; 3], "a refused call left send as it was");
            let e = pg
                .allreduce_premul_sum(&mut [1f32; 3], f64::NAN)
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a finite number"), "{e}");
        };
        spawn_ranks(n, check);
        spawn_ranks_tcp(n, check);
    }
}

#[test]
fn reduce_is_bitwise_the_allreduce_on_the_root() {
    // Non-integer values, where the fold order shows in the last bits.
    for n in [2, 3, 5] {
        let out = spawn_ranks_tcp(n, |pg| {
            let r = pg.rank();
            let mut same = true;
            for count in [5usize, 40_000] {
                let x: Vec<f32> = (0..count)
                    .map(|i| ((i * 31 + r * 17) % 101) as f32 * 0.013 + 1e-3 * r as f32)
                    .collect();
                let mut a = x.clone();
                pg.allreduce(&mut a, ReduceOp::Sum).unwrap();
                let mut b = x.clone();
                pg.reduce(&mut b, ReduceOp::Sum, 1).unwrap();
                if r == 1 {
                    same &= a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits());
                }
            }
            same
        });
        assert!(out.iter().all(|&s| s), "world {n}");
    }
}

fn rooted<T: Element + PartialEq + std::fmt::Debug>(pg: &ProcessGroup) {
    let (n, r) = (pg.world_size(), pg.rank());
    for count in COUNTS {
        let ty = std::any::type_name::<T>();
        for root in [0, n / 2] {
            // gather
            let send = input::<T>(r, count);
            let mut recv = if r == root {
                vec![T::from_f64(0.0); count * n]
            } else {
                Vec::new()
            };
            pg.gather(&send, &mut recv, root).unwrap();
            if r == root {
                let want: Vec<T> = (0..n).flat_map(|p| input::<T>(p, count)).collect();
                assert_eq!(recv, want, "gather {ty} n={n} count={count} root={root}");
            }
            // scatter: block p of the root's send is rank p's input.
            let send: Vec<T> = if r == root {
                (0..n).flat_map(|p| input::<T>(p + 10, count)).collect()
            } else {
                Vec::new()
            };
            let mut recv = vec![T::from_f64(0.0); count];
            pg.scatter(&send, &mut recv, root).unwrap();
            assert_eq!(
                recv,
                input::<T>(r + 10, count),
                "scatter {ty} n={n} count={count}"
            );
        }
        // all_to_all, equal blocks: block p from rank q is input(q * n + p).
        let send: Vec<T> = (0..n).flat_map(|p| input::<T>(r * n + p, count)).collect();
        let mut recv = vec![T::from_f64(0.0); count * n];
        pg.all_to_all(&send, &mut recv).unwrap();
        let want: Vec<T> = (0..n).flat_map(|q| input::<T>(q * n + r, count)).collect();
        assert_eq!(recv, want, "all_to_all {ty} n={n} count={count}");
        // all_to_all_single, unequal splits: rank q sends (q + p + count) % 4 elements to p.
        let split = |q: usize, p: usize| (q + p + count) % 4;
        let send_splits: Vec<usize> = (0..n).map(|p| split(r, p)).collect();
        let recv_splits: Vec<usize> = (0..n).map(|q| split(q, r)).collect();
        let send: Vec<T> = (0..n)
            .flat_map(|p| input::<T>(r * n + p, split(r, p)))
            .collect();
        let mut recv = vec![T::from_f64(0.0); recv_splits.iter().sum()];
        pg.all_to_all_single(&send, &send_splits, &mut recv, &recv_splits)
            .unwrap();
        let want: Vec<T> = (0..n)
            .flat_map(|q| input::<T>(q * n + r, split(q, r)))
            .collect();
        assert_eq!(recv, want, "all_to_all_single {ty} n={n} count={count}");
        // allgather_v: rank p contributes (count + p) % 5 * (p + 1) elements.
        let counts: Vec<usize> = (0..n).map(|p| (count + p) % 5 * (p + 1)).collect();
        let send = input::<T>(r + 3, counts[r]);
        let mut recv = vec![T::from_f64(0.0); counts.iter().sum()];
        pg.allgather_v(&send, &mut recv, &counts).unwrap();
        let want: Vec<T> = (0..n).flat_map(|p| input::<T>(p + 3, counts[p])).collect();
        assert_eq!(recv, want, "allgather_v {ty} n={n} count={count}");
    }
}

fn moves(pg: ProcessGroup) {
    rooted::<f32>(&pg);
    rooted::<u8>(&pg);
    rooted::<i64>(&pg);
    rooted::<f64>(&pg);
}

#[test]
fn gather_scatter_all_to_all_and_allgather_v_move_every_block() {
    for n in WORLDS {
        spawn_ranks(n, moves);
        spawn_ranks_tcp(n, moves);
    }
}

/// Rank `r`'s element `i` as a float whose sums round: every grouping of a fold gives
/// other bits, so a result equal to the allreduce's was folded in the same order.
fn noisy(r: usize, i: usize) -> f32 {
    let x = (r as u64 * 2_654_435_761 + i as u64 * 40_503) % 1_000_003;
    (x as f32).sqrt() * 1.000_001_f32.powi((i % 97) as i32) - 500.0
}

fn reduce_scatter_v_checks(pg: ProcessGroup) -> usize {
    let (n, r) = (pg.world_size(), pg.rank());
    let mut checked = 0;
    for count in [0usize, 1, 7, 1001, 20_011, 300_007] {
        // Blocks as the allreduce's segments: bitwise the allreduce's values.
        let counts: Vec<usize> = (0..n)
            .map(|s| phalanx_collectives::segments::segment(count, n, s).len())
            .collect();
        for op in [ReduceOp::Sum, ReduceOp::Avg] {
            let input: Vec<f32> = (0..count).map(|i| noisy(r, i)).collect();
            let mut all = input.clone();
            pg.allreduce(&mut all, op).unwrap();
            let mut send = input.clone();
            let mut recv = vec![0f32; counts[r]];
            pg.reduce_scatter_v(&mut send, &mut recv, &counts, op)
                .unwrap();
            let seg = phalanx_collectives::segments::segment(count, n, r);
            let same = recv
                .iter()
                .zip(&all[seg])
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "reduce_scatter_v {op} n={n} count={count}: not the allreduce's bits"
            );
            let work = pg.reduce_scatter_v_async(input.clone(), counts.clone(), op);
            assert_eq!(work.wait().unwrap(), recv, "async n={n} count={count}");
            let work = pg.reduce_scatter_v_async_buffer(input, counts.clone(), op);
            let start: usize = counts[..r].iter().sum();
            let in_place = work.wait().unwrap();
            assert_eq!(
                in_place[start..start + counts[r]],
                recv,
                "in place n={n} count={count}"
            );
            checked += 1;
        }
        // Any blocks, empty ones among them: integers against a serial fold.
        let counts: Vec<usize> = (0..n)
            .map(|p| (count / (p + 1)) * (p % 3 != 1) as usize)
            .collect();
        let total: usize = counts.iter().sum();
        let mut send = input::<i64>(r, total);
        let mut recv = vec![0i64; counts[r]];
        pg.reduce_scatter_v(&mut send, &mut recv, &counts, ReduceOp::Sum)
            .unwrap();
        let start: usize = counts[..r].iter().sum();
        let want = reference::<i64>(n, total, ReduceOp::Sum);
        assert_eq!(
            recv,
            want[start..start + counts[r]],
            "n={n} counts={counts:?}"
        );
        // allgather_v's async form.
        let mine: Vec<i64> = (0..counts[r]).map(|i| (r * 1000 + i) as i64).collect();
        let got = pg.allgather_v_async(mine, counts.clone()).wait().unwrap();
        let want: Vec<i64> = (0..n)
            .flat_map(|p| (0..counts[p]).map(move |i| (p * 1000 + i) as i64))
            .collect();
        assert_eq!(got, want, "allgather_v_async n={n} counts={counts:?}");
        checked += 1;
    }
    // Counts that do not add up, or do not match this rank's buffer, are refused.
    let e = pg
        .reduce_scatter_v(&mut [0f32; 7], &mut [0f32; 1], &vec![1; n], ReduceOp::Sum)
        .unwrap_err()
        .to_string();
    assert!(e.contains("add up to"), "{e}");
    let e = pg
        .reduce_scatter_v(
            &mut vec![0f32; 2 * n],
            &mut [0f32; 1],
            &vec![2; n],
            ReduceOp::Sum,
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("recv holds 1 elements but counts[{r}] is 2")),
        "{e}"
    );
    checked
}

#[test]
fn reduce_scatter_v_is_bitwise_the_allreduce_on_its_segments() {
    for n in [1, 2, 3, 4, 5] {
        let checked: usize = spawn_ranks(n, reduce_scatter_v_checks).into_iter().sum();
        assert!(checked > 0);
        let checked: usize = spawn_ranks_tcp(n, reduce_scatter_v_checks)
            .into_iter()
            .sum();
        assert!(checked > 0);
    }
}

#[test]
fn shared_memory_moves_blocks_larger_than_its_buffers_in_chunks() {
    // 3 MiB per block: several chunks of the shared buffers for allgather and all_to_all.
    // Values unique per (block, element), exact in f32, so a misplaced chunk shows.
    let per = 3 << 18;
    let block = |b: usize| -> Vec<f32> { (0..per).map(|i| (b * 1_000_003 + i) as f32).collect() };
    for n in [2, 3, 4] {
        let out = spawn_ranks(n, move |pg| {
            assert!(pg.uses_shared_memory());
            let r = pg.rank();
            let mut all = vec![0f32; per * n];
            pg.allgather(&block(r), &mut all).unwrap();
            let want: Vec<f32> = (0..n).flat_map(block).collect();
            let gathered = all == want;
            let send: Vec<f32> = (0..n).flat_map(|p| block(r * n + p)).collect();
            let mut recv = vec![0f32; per * n];
            pg.all_to_all(&send, &mut recv).unwrap();
            let want: Vec<f32> = (0..n).flat_map(|q| block(q * n + r)).collect();
            gathered && recv == want
        });
        assert!(out.into_iter().all(|ok| ok), "world {n}");
    }
}

#[test]
fn asynchronous_forms_give_the_blocking_results_in_issue_order() {
    for n in [1, 2, 3, 4] {
        let out = spawn_ranks_tcp(n, |pg| {
            let r = pg.rank();
            let b = pg.broadcast_async(vec![r as i32; 5], n - 1);
            let g = pg.allgather_async(vec![r as i32; 3]);
            let rs = pg.reduce_scatter_async(vec![1i32; 2 * n], ReduceOp::Sum);
            let bar = pg.barrier_async();
            let red = pg.reduce_async(vec![r as i32 + 1; 4], ReduceOp::Max, 0);
            let a2a = pg.all_to_all_async((0..n).map(|p| (10 * r + p) as i32).collect());
            // A blocking collective after them runs after them.
            let mut x = [1i32];
            pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
            assert_eq!(b.wait().unwrap(), vec![n as i32 - 1; 5]);
            let want: Vec<i32> = (0..n).flat_map(|p| [p as i32; 3]).collect();
            assert_eq!(g.wait().unwrap(), want);
            assert_eq!(rs.wait().unwrap(), vec![n as i32; 2]);
            bar.wait().unwrap();
            let red = red.wait().unwrap();
            if r == 0 {
                assert_eq!(red, vec![n as i32; 4]);
            }
            let want: Vec<i32> = (0..n).map(|q| (10 * q + r) as i32).collect();
            assert_eq!(a2a.wait().unwrap(), want);
            x[0]
        });
        assert_eq!(out, vec![n as i32; n]);
    }
}

#[test]
fn object_collectives_carry_bytes_of_any_length() {
    for n in [1, 2, 3, 5] {
        let out = spawn_ranks(n, |pg| {
            let r = pg.rank();
            let mine = vec![r as u8; r * 3];
            let all = phalanx_pg::all_gather_object(&pg, &mine).unwrap();
            let want: Vec<Vec<u8>> = (0..n).map(|p| vec![p as u8; p * 3]).collect();
            assert_eq!(all, want);
            let root_obj = b"the root's object".to_vec();
            let got =
                phalanx_pg::broadcast_object(&pg, if r == 0 { &root_obj } else { &[] }, 0).unwrap();
            assert_eq!(got, root_obj);
            let gathered = phalanx_pg::gather_object(&pg, &mine, n - 1).unwrap();
            assert_eq!(gathered.is_some(), r == n - 1);
            if let Some(g) = gathered {
                assert_eq!(g, want);
            }
            let objs: Vec<Vec<u8>> = (0..n).map(|p| vec![7u8; p + 1]).collect();
            let got =
                phalanx_pg::scatter_object_list(&pg, if r == 0 { &objs } else { &[] }, 0).unwrap();
            assert_eq!(got, vec![7u8; r + 1]);
            true
        });
        assert!(out.into_iter().all(|ok| ok));
    }
}

#[test]
fn a_rank_in_the_wrong_collective_is_named() {
    // Rank 1's gather frame reaches rank 0, which is in a reduce.
    let out = spawn_ranks_tcp(2, |pg| {
        let mut b = [1f32; 2];
        if pg.rank() == 0 {
            Some(pg.reduce(&mut b, ReduceOp::Sum, 0).unwrap_err().to_string())
        } else {
            let _ = pg.gather(&b, &mut [], 0);
            None
        }
    });
    let e = out[0].as_deref().unwrap();
    assert!(
        e.contains("rank 0 called reduce") && e.contains("rank 1 called gather"),
        "{e}"
    );
}

#[test]
fn bad_arguments_are_refused_before_anything_moves() {
    let out = spawn_ranks(2, |pg| {
        let mut small = [0f32; 1];
        let a = pg.gather(&[1f32; 2], &mut small, pg.rank()).unwrap_err();
        let b = pg
            .all_to_all_single(&[1f32; 3], &[1, 1], &mut [0f32; 2], &[1, 1])
            .unwrap_err();
        let c = pg
            .allgather_v(&[1f32; 2], &mut [0f32; 2], &[1, 1])
            .unwrap_err();
        (a.to_string(), b.to_string(), c.to_string())
    });
    for (r, (a, b, c)) in out.into_iter().enumerate() {
        assert!(a.contains("expected send.len() × world_size = 4"), "{a}");
        assert!(
            b.contains("send sizes add up to 2 but the send buffer holds 3"),
            "{b}"
        );
        assert!(c.contains(&format!("counts[{r}] is 1")), "{c}");
    }
}
