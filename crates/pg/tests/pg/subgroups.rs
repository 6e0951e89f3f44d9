//! Subgroups: their own ranks, sequence and connections, running at the same time as the
//! world's collectives; disagreements and wrong collectives named with the subgroup.

use std::sync::Arc;

use phalanx_core::ReduceOp;
use phalanx_pg::{new_group, new_subgroups, new_subgroups_by_host, split_group};
use phalanx_testing::{spawn_ranks, spawn_ranks_tcp};

#[test]
fn disjoint_subgroups_run_other_collectives_while_the_world_allreduces() {
    let out = spawn_ranks_tcp(4, |pg| {
        let r = pg.rank();
        let low = new_group(&pg, &[0, 1]).unwrap();
        let high = new_group(&pg, &[2, 3]).unwrap();
        let sub = Arc::new(low.or(high).expect("every rank is in one"));
        assert_eq!((sub.world_size(), sub.rank()), (2, r % 2));
        assert_eq!(sub.job_rank(sub.rank()), r);
        let pg = Arc::new(pg);
        std::thread::scope(|s| {
            // The subgroups: [0, 1] broadcasts, [2, 3] allgathers, 300 times each.
            let sub2 = sub.clone();
            let side = s.spawn(move || {
                for i in 0..300i32 {
                    if r < 2 {
                        let mut b = [if sub2.rank() == 1 { i } else { 0 }; 3];
                        sub2.broadcast(&mut b, 1).unwrap();
                        assert_eq!(b, [i; 3]);
                    } else {
                        let mut all = [0i32; 2];
                        sub2.allgather(&[i + r as i32], &mut all).unwrap();
                        assert_eq!(all, [i + 2, i + 3]);
                    }
                }
            });
            // Meanwhile, on this thread, the world.
            for i in 0..300i64 {
                let mut x = [i + r as i64];
                pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
                assert_eq!(x[0], 4 * i + 6);
            }
            side.join().unwrap();
        });
        true
    });
    assert!(out.into_iter().all(|ok| ok));
}

#[test]
fn split_orders_by_key_and_leaves_colorless_ranks_out() {
    let out = spawn_ranks(5, |pg| {
        let r = pg.rank();
        // Rank 4 joins no group; the others by parity, in reverse rank order.
        let color = (r < 4).then_some((r % 2) as u32);
        let sub = split_group(&pg, color, -(r as i64)).unwrap();
        sub.map(|sub| {
            let members: Vec<usize> = (0..sub.world_size()).map(|i| sub.job_rank(i)).collect();
            let mut x = [1i32 << r];
            sub.allreduce(&mut x, ReduceOp::Sum).unwrap();
            (sub.rank(), members, x[0])
        })
    });
    assert_eq!(out[0], Some((1, vec![2, 0], 0b101)));
    assert_eq!(out[1], Some((1, vec![3, 1], 0b1010)));
    assert_eq!(out[2], Some((0, vec![2, 0], 0b101)));
    assert_eq!(out[3], Some((0, vec![3, 1], 0b1010)));
    assert_eq!(out[4], None);
}

#[test]
fn consecutive_and_per_host_subgroups() {
    let out = spawn_ranks_tcp(6, |pg| {
        let pairs = new_subgroups(&pg, 2).unwrap();
        let host = new_subgroups_by_host(&pg).unwrap();
        let threes = new_subgroups(&pg, 3).unwrap();
        // A subgroup of a subgroup maps back to the job's ranks.
        let inner = new_group(&threes, &[2, 0]).unwrap();
        let inner = inner.map(|g| {
            (0..g.world_size())
                .map(|i| g.job_rank(i))
                .collect::<Vec<_>>()
        });
        let mut x = [pg.rank() as i64];
        pairs.allreduce(&mut x, ReduceOp::Sum).unwrap();
        (x[0], host.world_size(), threes.job_rank(0), inner)
    });
    for (r, (pair_sum, host_size, first, inner)) in out.into_iter().enumerate() {
        assert_eq!(pair_sum, (4 * (r / 2) + 1) as i64, "rank {r}");
        assert_eq!(host_size, 6, "every test rank runs on this host");
        assert_eq!(first, 3 * (r / 3));
        let base = 3 * (r / 3);
        let want = (r % 3 != 1).then(|| vec![base + 2, base]);
        assert_eq!(inner, want, "rank {r}");
    }
}

#[test]
fn a_wrong_collective_in_a_subgroup_is_named_with_the_subgroup() {
    let out = spawn_ranks_tcp(3, |pg| {
        let sub = new_group(&pg, &[1, 2]).unwrap();
        let sub = sub?;
        let mut b = [1f32; 4];
        let e = if sub.rank() == 0 {
            sub.allreduce(&mut b, ReduceOp::Sum)
        } else {
            sub.broadcast(&mut b, 0)
        };
        Some(e.unwrap_err().to_string())
    });
    assert_eq!(out[0], None);
    let joined = format!(
        "{}\n{}",
        out[1].as_deref().unwrap(),
        out[2].as_deref().unwrap()
    );
    assert!(
        joined.contains("in the subgroup of job ranks [1, 2]"),
        "{joined}"
    );
    assert!(
        joined.contains("allreduce") && joined.contains("broadcast"),
        "{joined}"
    );
}

#[test]
fn ranks_that_ask_for_different_groups_are_named() {
    let out = spawn_ranks(2, |pg| {
        let ranks: &[usize] = if pg.rank() == 0 { &[0, 1] } else { &[1, 0] };
        new_group(&pg, ranks).map(|_| ()).unwrap_err().to_string()
    });
    let joined = out.join("\n");
    assert!(
        joined.contains("asked for ranks")
            && joined.contains("[0, 1]")
            && joined.contains("[1, 0]"),
        "{joined}"
    );
    assert!(
        joined.contains("another rank asked for other ranks"),
        "{joined}"
    );
}

#[test]
fn bad_group_arguments_are_refused() {
    let out = spawn_ranks(2, |pg| {
        let a = new_group(&pg, &[0, 5]).unwrap_err().to_string();
        let b = new_group(&pg, &[1, 1]).unwrap_err().to_string();
        let c = new_subgroups(&pg, 3).unwrap_err().to_string();
        (a, b, c)
    });
    for (a, b, c) in out {
        assert!(a.contains("rank 5 is not below world_size 2"), "{a}");
        assert!(b.contains("rank 1 is listed twice"), "{b}");
        assert!(
            c.contains("group size 3 does not divide world_size 2"),
            "{c}"
        );
    }
}
