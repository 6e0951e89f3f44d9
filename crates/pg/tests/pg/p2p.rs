//! Point-to-point that composes with collectives: each pair of ranks numbers its own messages
//! (so send/recv among some ranks leaves the others' collective sequence alone), frames of
//! either stream may arrive first on a connection (Note [Early frames]), and
//! `batch_isend_irecv` moves both directions at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use phalanx_core::ReduceOp;
use phalanx_pg::{P2POp, ProcessGroup};
use phalanx_testing::{spawn_ranks, spawn_ranks_tcp};

/// Ranks 0 and 1 exchange a message, then all three reduce: the pair's messages must not move
/// rank 2 one step behind (it used to fail as a "collective mismatch").
fn pair_then_all(pg: ProcessGroup) -> Vec<f32> {
    let mut sums = Vec::new();
    for round in 0..50u32 {
        match pg.rank() {
            0 => pg.send(&[round as f32; 5], 1, round).unwrap(),
            1 => {
                let mut b = [0f32; 5];
                pg.recv(&mut b, 0, round).unwrap();
                assert_eq!(b, [round as f32; 5]);
            }
            _ => {}
        }
        let mut x = [pg.rank() as f32 + round as f32];
        pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
        sums.push(x[0]);
    }
    sums
}

#[test]
fn a_pairs_messages_leave_the_third_ranks_collectives_alone() {
    let expected: Vec<f32> = (0..50).map(|r| 3.0 + 3.0 * r as f32).collect();
    for sums in spawn_ranks(3, pair_then_all) {
        assert_eq!(sums, expected);
    }
    for sums in spawn_ranks_tcp(3, pair_then_all) {
        assert_eq!(sums, expected);
    }
}

/// A ring of send/recv interleaved with allreduces of all four ranks, 1,000 rounds.
fn ring(pg: ProcessGroup) -> i64 {
    let (r, n) = (pg.rank(), pg.world_size());
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    let mut checked = 0;
    for round in 0..1000i64 {
        let tag = (round % 7) as u32;
        pg.send(&[round, r as i64], next, tag).unwrap();
        let mut got = [0i64; 2];
        pg.recv(&mut got, prev, tag).unwrap();
        assert_eq!(got, [round, prev as i64], "rank {r} round {round}");
        let mut x = [round + r as i64];
        pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
        assert_eq!(x[0], 4 * round + 6, "rank {r} round {round}");
        checked += 1;
    }
    checked
}

#[test]
fn four_ranks_ring_of_send_recv_with_allreduces_of_all_1000_rounds() {
    assert_eq!(spawn_ranks_tcp(4, ring), vec![1000; 4]);
    assert_eq!(spawn_ranks(4, ring), vec![1000; 4]);
}

/// Every rank sends `rounds` messages of `len` floats to the next rank round a ring with no
/// receive posted, then receives the previous rank's: each send is larger than the socket
/// buffers, so it completes only because the peer's own waiting send reads it ahead (Note
/// [Sends that read]). A pipeline that sends each activation when it is made and receives it
/// when it is needed relies on this.
fn sends_before_receives(pg: ProcessGroup, len: usize, rounds: u32) -> bool {
    let (r, n) = (pg.rank(), pg.world_size());
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    assert!(pg.sends_complete_alone());
    for round in 0..rounds {
        pg.send(&vec![(r as u32 * 10 + round) as f32; len], next, round)
            .unwrap();
    }
    for round in 0..rounds {
        let mut got = vec![0f32; len];
        pg.recv(&mut got, prev, round).unwrap();
        let want = (prev as u32 * 10 + round) as f32;
        assert!(got.iter().all(|&v| v == want), "rank {r} round {round}");
    }
    true
}

/// Floats in a message larger than a connection's socket buffers can hold at most (the send
/// buffer's and the receive buffer's largest sizes, `tcp_wmem` and `tcp_rmem`), and at least
/// 16 MiB.
fn more_than_socket_buffers() -> usize {
    let largest = |name: &str| -> usize {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}"))
            .ok()
            .and_then(|s| s.split_whitespace().last()?.parse().ok())
            .unwrap_or(0)
    };
    let bytes = (largest("tcp_wmem") + largest("tcp_rmem") + (1 << 20)).max(16 << 20);
    bytes / 4
}

#[test]
fn large_sends_complete_with_no_receive_posted() {
    let len = more_than_socket_buffers();
    assert_eq!(
        spawn_ranks_tcp(2, move |pg| sends_before_receives(pg, len, 2)),
        [true; 2]
    );
    assert_eq!(
        spawn_ranks(3, move |pg| sends_before_receives(pg, len, 3)),
        [true; 3]
    );
}

/// A large send waits while its peer computes, reading ahead from a third rank whose group has
/// already closed: the closed link ends nothing (it is the link of no operation here), and the
/// send completes once its peer receives.
#[test]
fn a_waiting_send_reads_past_a_closed_link() {
    let len = more_than_socket_buffers();
    let done = spawn_ranks_tcp(3, move |pg| match pg.rank() {
        0 => {
            pg.send(&vec![1f32; len], 1, 0).unwrap();
            true
        }
        1 => {
            std::thread::sleep(std::time::Duration::from_millis(500));
            let mut got = vec![0f32; len];
            pg.recv(&mut got, 0, 0).unwrap();
            got.iter().all(|&v| v == 1.0)
        }
        _ => {
            drop(pg);
            true
        }
    });
    assert_eq!(done, [true; 3]);
}

/// Rank 0 sends, then enters an allreduce; rank 1 enters the allreduce first and receives
/// after it. Rank 1's allreduce finds the message first on the connection and keeps it.
fn send_runs_ahead(pg: ProcessGroup, len: usize) -> f64 {
    let mut x = [pg.rank() as f64 + 1.0];
    if pg.rank() == 0 {
        pg.send(&vec![7u8; len], 1, 3).unwrap();
        pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
    } else {
        pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
        let mut b = vec![0u8; len];
        pg.recv(&mut b, 0, 3).unwrap();
        assert!(b.iter().all(|&v| v == 7));
    }
    x[0]
}

#[test]
fn a_message_may_arrive_before_the_collective_the_receiver_is_in() {
    // Shorter and longer than the allreduce's frame: the bytes read past an early message
    // start the next frame.
    for len in [0, 1, 5, 4096, 3 << 20] {
        assert_eq!(
            spawn_ranks_tcp(2, move |pg| send_runs_ahead(pg, len)),
            vec![3.0, 3.0],
            "len {len}"
        );
    }
}

#[test]
fn batch_isend_irecv_moves_both_directions_at_once() {
    // 8 MiB each way: blocking sends in the same order on both ranks would wait on each
    // other's full socket buffers.
    let n = 2 << 20;
    let out = spawn_ranks_tcp(2, move |pg| {
        let other = 1 - pg.rank();
        let ops = vec![
            P2POp::Send {
                buf: vec![pg.rank() as f32 + 1.0; n],
                peer: other,
                tag: 1,
            },
            P2POp::Recv {
                buf: vec![0f32; n],
                peer: other,
                tag: 1,
            },
            // A second message to the same peer travels in order, one step later.
            P2POp::Send {
                buf: vec![10.0 * (pg.rank() as f32 + 1.0); 3],
                peer: other,
                tag: 2,
            },
            P2POp::Recv {
                buf: vec![0f32; 3],
                peer: other,
                tag: 2,
            },
        ];
        let done = pg.batch_isend_irecv(ops).wait().unwrap();
        let first = done[1].buf().iter().all(|&v| v == other as f32 + 1.0);
        (first, done[3].buf().to_vec())
    });
    assert!(out[0].0 && out[1].0);
    assert_eq!(out[0].1, vec![20.0; 3]);
    assert_eq!(out[1].1, vec![10.0; 3]);
}

#[test]
fn batch_isend_irecv_exchanges_with_every_peer() {
    // An all-to-all of four ranks as one batch, then an allreduce of all.
    let out = spawn_ranks_tcp(4, |pg| {
        let (r, n) = (pg.rank(), pg.world_size());
        let mut ops = Vec::new();
        for p in (0..n).filter(|&p| p != r) {
            ops.push(P2POp::Send {
                buf: vec![(10 * r + p) as i64; 100],
                peer: p,
                tag: 0,
            });
            ops.push(P2POp::Recv {
                buf: vec![0i64; 100],
                peer: p,
                tag: 0,
            });
        }
        let done = pg.batch_isend_irecv(ops).wait().unwrap();
        for op in &done {
            if let P2POp::Recv { buf, peer, .. } = op {
                assert!(buf.iter().all(|&v| v == (10 * peer + r) as i64));
            }
        }
        let mut x = [1i64];
        pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
        x[0]
    });
    assert_eq!(out, vec![4; 4]);
}

#[test]
fn isend_and_irecv_complete_through_work() {
    let out = spawn_ranks_tcp(2, |pg| {
        if pg.rank() == 0 {
            let w = pg.isend(vec![1.5f64, 2.5], 1, 9);
            let mut x = [1.0f64];
            // A blocking collective after the queued send runs after it.
            pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
            assert_eq!(w.wait().unwrap(), vec![1.5, 2.5]);
            x[0]
        } else {
            let w = pg.irecv(vec![0f64; 2], 0, 9);
            let got = w.wait().unwrap();
            assert_eq!(got, vec![1.5, 2.5]);
            let mut x = [1.0f64];
            pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
            x[0]
        }
    });
    assert_eq!(out, vec![2.0, 2.0]);
}

#[test]
fn a_tag_mismatch_names_both_messages() {
    let out = spawn_ranks_tcp(2, |pg| {
        if pg.rank() == 0 {
            let _ = pg.send(&[1f32; 4], 1, 5);
            None
        } else {
            let mut b = [0f32; 4];
            Some(pg.recv(&mut b, 0, 6).unwrap_err().to_string())
        }
    });
    let e = out[1].as_deref().unwrap();
    assert!(e.contains("tag=6") && e.contains("tag=5"), "{e}");
}

#[test]
fn point_to_point_with_itself_or_a_missing_rank_is_refused() {
    let out = spawn_ranks(2, |pg| {
        let me = pg.rank();
        let a = pg.send(&[1u8], me, 0).unwrap_err().to_string();
        let b = pg.irecv(vec![0u8], 5, 0).wait().unwrap_err().to_string();
        (a, b)
    });
    for (a, b) in out {
        assert!(a.contains("is this rank"), "{a}");
        assert!(b.contains("irecv peer 5 is not below world_size 2"), "{b}");
    }
}

/// Under background progress (Note [Background progress]) a send larger than the socket
/// buffers completes while its peer computes: the peer here waits for the sender's word that
/// the send completed before it receives (for 20 s at most, after which it receives anyway and
/// the test fails, as it does without the progress).
fn a_send_completes_while_its_peer_computes(
    pg: ProcessGroup,
    sent: &AtomicBool,
    len: usize,
) -> bool {
    pg.start_progress().unwrap();
    match pg.rank() {
        0 => {
            pg.send(&vec![1f32; len], 1, 0).unwrap();
            sent.store(true, Ordering::SeqCst);
            true
        }
        _ => {
            let until = Instant::now() + Duration::from_secs(20);
            while !sent.load(Ordering::SeqCst) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            let before = sent.load(Ordering::SeqCst);
            let mut got = vec![0f32; len];
            pg.recv(&mut got, 0, 0).unwrap();
            before && got.iter().all(|&v| v == 1.0)
        }
    }
}

#[test]
fn under_background_progress_a_send_completes_while_its_peer_computes() {
    let len = more_than_socket_buffers();
    let sent = AtomicBool::new(false);
    assert_eq!(
        spawn_ranks_tcp(2, |pg| a_send_completes_while_its_peer_computes(
            pg, &sent, len
        )),
        [true; 2]
    );
    let sent = AtomicBool::new(false);
    assert_eq!(
        spawn_ranks(2, |pg| a_send_completes_while_its_peer_computes(
            pg, &sent, len
        )),
        [true; 2]
    );
}

/// Under background progress, collectives and point-to-point messages of several sizes, with
/// ranks that arrive at different times (so that a peer's frames of the next operation, of
/// either stream, are read ahead between operations and taken from there), give the same
/// results as without it; and a peer that leaves is reported by the receive that needs it.
#[test]
fn background_progress_keeps_every_result_and_reports_a_peer_that_left() {
    let run = |pg: ProcessGroup| -> bool {
        pg.start_progress().unwrap();
        let (r, n) = (pg.rank(), pg.world_size());
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        for round in 0..60u32 {
            if (round as usize + r).is_multiple_of(3) {
                std::thread::sleep(Duration::from_millis(2));
            }
            let len = [1usize, 1000, 300_000][round as usize % 3];
            pg.send(&vec![(r as u32 * 100 + round) as f32; len], next, round)
                .unwrap();
            let mut x = vec![r as f32 + round as f32; len];
            pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
            let want = (0..n).map(|q| (q as u32 + round) as f32).sum::<f32>();
            assert!(x.iter().all(|&v| v == want), "rank {r} round {round}");
            let mut got = vec![0f32; len];
            pg.recv(&mut got, prev, round).unwrap();
            let want = (prev as u32 * 100 + round) as f32;
            assert!(got.iter().all(|&v| v == want), "rank {r} round {round}");
        }
        // Rank 0 leaves; rank 1, idle meanwhile, learns it from its next receive.
        match r {
            0 => true,
            _ => {
                std::thread::sleep(Duration::from_millis(200));
                let mut got = [0f32; 4];
                let err = pg.recv(&mut got, 0, 99).unwrap_err().to_string();
                assert!(err.contains("rank 0") || err.contains("peer 0"), "{err}");
                true
            }
        }
    };
    assert_eq!(spawn_ranks_tcp(3, run), [true; 3]);
    assert_eq!(spawn_ranks(3, run), [true; 3]);
}

/// Under background progress a collective step of the same group that waits reads ahead too:
/// rank 2 sends rank 1 more than the socket buffers hold, then enters a ring allreduce over
/// TCP that ranks 0 and 1 entered first. Rank 1's ring steps receive from rank 0 only, and
/// rank 0 waits for rank 2: without the read-ahead, rank 2's send waits for rank 1, which
/// waits for rank 0, which waits for rank 2 (until the timeout).
#[test]
fn under_background_progress_a_collective_that_waits_takes_a_send_ahead() {
    let len = more_than_socket_buffers();
    let n = 1 << 20;
    let done = spawn_ranks_tcp(3, |pg| {
        pg.start_progress().unwrap();
        let mut x = vec![1f32; n];
        if pg.rank() == 2 {
            pg.send(&vec![3f32; len], 1, 0).unwrap();
        }
        pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
        let mut ok = x.iter().all(|&v| v == 3.0);
        if pg.rank() == 1 {
            let mut got = vec![0f32; len];
            pg.recv(&mut got, 2, 0).unwrap();
            ok &= got.iter().all(|&v| v == 3.0);
        }
        ok
    });
    assert_eq!(done, [true; 3]);
}
