//! Thread-level tests of the process group: async order, fail-fast errors naming the culprit.

use std::time::{Duration, Instant};

use phalanx_core::ReduceOp;
use phalanx_testing::{spawn_ranks, spawn_ranks_tcp};

#[test]
fn async_works_complete_in_issue_order() {
    let out = spawn_ranks(3, |pg| {
        let works: Vec<_> = (0..20)
            .map(|i| pg.allreduce_async(vec![(pg.rank() + i) as i64; 1000 + i], ReduceOp::Sum))
            .collect();
        // A blocking call after queued ones runs after them.
        let mut x = [pg.rank() as f64];
        pg.allreduce(&mut x, ReduceOp::Max).unwrap();
        let results: Vec<Vec<i64>> = works.into_iter().map(|w| w.wait().unwrap()).collect();
        (x[0], results)
    });
    for (x, results) in out {
        assert_eq!(x, 2.0);
        for (i, r) in results.iter().enumerate() {
            assert_eq!(r.len(), 1000 + i);
            assert!(r.iter().all(|&v| v == (3 * i + 3) as i64), "work {i}");
        }
    }
}

#[test]
fn mismatched_sizes_name_both_sides_on_every_rank() {
    let start = Instant::now();
    let errors = spawn_ranks(4, |pg| {
        let n = if pg.rank() == 2 { 12 } else { 10 };
        let mut v = vec![1.0f32; n];
        let err = pg.allreduce(&mut v, ReduceOp::Sum).unwrap_err().to_string();
        // The group stays failed: later calls fail at once with the same cause.
        let again = pg.barrier().unwrap_err().to_string();
        (err, again)
    });
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    for (rank, (err, again)) in errors.iter().enumerate() {
        assert!(
            err.contains("count=12") && err.contains("count=10"),
            "rank {rank}: {err}"
        );
        assert!(err.contains("mismatch"), "rank {rank}: {err}");
        assert!(again.contains("has failed"), "rank {rank}: {again}");
    }
}

#[test]
fn different_collectives_are_named() {
    let errors = spawn_ranks(2, |pg| {
        if pg.rank() == 0 {
            pg.barrier().unwrap_err().to_string()
        } else {
            let mut v = [0u8; 3];
            pg.broadcast(&mut v, 0).unwrap_err().to_string()
        }
    });
    for e in &errors {
        assert!(
            e.contains("barrier #0") && e.contains("broadcast #0"),
            "{e}"
        );
    }
}

#[test]
fn a_failing_rank_is_named_by_every_other_rank() {
    let start = Instant::now();
    let errors = spawn_ranks(4, |pg| {
        let mut v = vec![1.0f32; 1 << 16];
        pg.allreduce(&mut v, ReduceOp::Sum).unwrap();
        if pg.rank() == 3 {
            pg.abort("rank 3 failed: out of memory in the data loader");
            return String::new();
        }
        pg.allreduce(&mut v, ReduceOp::Sum).unwrap_err().to_string()
    });
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    for e in &errors[..3] {
        assert!(e.contains("rank 3 failed: out of memory"), "{e}");
    }
}

#[test]
fn argument_errors_are_reported_not_panicked() {
    spawn_ranks(2, |pg| {
        let mut recv = vec![0f32; 3];
        let e = pg
            .allgather(&[1.0f32, 2.0], &mut recv)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected send.len() × world_size = 4"), "{e}");
        let e = pg.broadcast(&mut recv, 5).unwrap_err().to_string();
        assert!(e.contains("broadcast root 5"), "{e}");
        // The group is still usable after a local argument error.
        pg.barrier().unwrap();
    });
}

#[test]
fn send_recv_pairs() {
    spawn_ranks(2, |pg| {
        if pg.rank() == 0 {
            pg.send(&[1i32, 2, 3], 1, 7).unwrap();
        } else {
            let mut b = [0i32; 3];
            pg.recv(&mut b, 0, 7).unwrap();
            assert_eq!(b, [1, 2, 3]);
        }
    });
}

#[test]
fn over_tcp_mismatch_and_failure_are_named_too() {
    let errors = spawn_ranks_tcp(3, |pg| {
        let n = if pg.rank() == 2 { 12 } else { 10 };
        let mut v = vec![1.0f32; n];
        pg.allreduce(&mut v, ReduceOp::Sum).unwrap_err().to_string()
    });
    for e in &errors {
        assert!(e.contains("count=12") && e.contains("count=10"), "{e}");
    }
    let errors = spawn_ranks_tcp(3, |pg| {
        let mut v = vec![1.0f32; 1 << 16];
        pg.allreduce(&mut v, ReduceOp::Sum).unwrap();
        if pg.rank() == 1 {
            pg.abort("rank 1 failed: disk full");
            return String::new();
        }
        pg.allreduce(&mut v, ReduceOp::Sum).unwrap_err().to_string()
    });
    assert!(
        errors[0].contains("rank 1 failed: disk full")
            && errors[2].contains("rank 1 failed: disk full"),
        "{errors:?}"
    );
}

#[test]
fn shared_memory_and_tcp_give_the_same_bits() {
    let input = |rank: usize| -> Vec<f32> {
        (0..100_003)
            .map(|i| ((i * 7 + rank * 13) % 1000) as f32 * 0.001 + 0.1)
            .collect()
    };
    let run = |tcp: bool| {
        let f = |pg: phalanx_pg::ProcessGroup| {
            let mut v = input(pg.rank());
            pg.allreduce(&mut v, ReduceOp::Avg).unwrap();
            v
        };
        if tcp {
            spawn_ranks_tcp(3, f)
        } else {
            spawn_ranks(3, f)
        }
    };
    let (a, b) = (run(false), run(true));
    assert_eq!(
        a[0].iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        b[0].iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
}
