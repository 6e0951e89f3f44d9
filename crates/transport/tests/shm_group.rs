//! The shared-memory step protocol under failure: aborts, timeouts, fingerprint mismatches,
//! a peer process that dies, and the futex wake path. Every wait here has a deadline.

use std::{
    process::{Child, Command},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex,
    },
    time::{Duration, Instant},
};

use phalanx_core::DType;
use phalanx_transport::{
    shm::{ShmGroup, ShmSegment},
    CollectiveKind, Error, Fingerprint,
};

const BUFFER: usize = 4096;
const CHILD_ENV: &str = "SHM_GROUP_TEST_CHILD_JOB";

fn fp(seq: u64, count: u64) -> Fingerprint {
    Fingerprint {
        seq,
        kind: CollectiveKind::Allreduce,
        op: None,
        dtype: DType::F32,
        count,
        root: 0,
    }
}

fn job() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "phalanx-test-shmgroup-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn open_retrying(name: &str, bytes: usize) -> ShmSegment {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ShmSegment::open(name, bytes) {
            Ok(s) => return s,
            Err(e) if Instant::now() > deadline => panic!("{name} never appeared: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

fn join(job: &str, rank: usize, world: usize, own: ShmSegment, timeout: Duration) -> ShmGroup {
    let bytes = ShmGroup::segment_bytes(BUFFER);
    let peers = (0..world)
        .map(|p| (p != rank).then(|| open_retrying(&format!("{job}-{p}"), bytes)))
        .collect();
    ShmGroup::new(rank, world, own, peers, timeout).unwrap()
}

/// Runs `f(rank, group)` on `world` threads; every wait times out after `timeout`.
fn with_group<R: Send>(
    world: usize,
    timeout: Duration,
    f: impl Fn(usize, &mut ShmGroup) -> R + Sync,
) -> Vec<R> {
    let job = job();
    let bytes = ShmGroup::segment_bytes(BUFFER);
    let own: Mutex<Vec<Option<ShmSegment>>> = Mutex::new(
        (0..world)
            .map(|r| Some(ShmSegment::create(&format!("{job}-{r}"), bytes).unwrap()))
            .collect(),
    );
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|rank| {
                let (f, own, job) = (&f, &own, &job);
                s.spawn(move || {
                    let seg = own.lock().unwrap()[rank].take().unwrap();
                    f(rank, &mut join(job, rank, world, seg, timeout))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn steps_keep_ranks_in_lockstep() {
    let out = with_group(4, Duration::from_secs(20), |rank, g| {
        for seq in 0..300 {
            g.step_all(&fp(seq, 1)).unwrap();
        }
        rank
    });
    assert_eq!(out, vec![0, 1, 2, 3]);
}

#[test]
fn sleeping_waiters_are_woken_not_polled() {
    // No spinning: every wait sleeps on the futex. A missed wake would cost a 20 ms poll
    // slice per step, 200 steps × 20 ms = 4 s; woken waiters take well under a second.
    let t = Instant::now();
    with_group(2, Duration::from_secs(20), |_, g| {
        let g2 = std::mem::replace(g, dummy());
        *g = g2.with_spin(Duration::ZERO);
        for seq in 0..200 {
            g.step_all(&fp(seq, 1)).unwrap();
        }
    });
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
}

/// A one-rank group, only to move a real one out of a `&mut`.
fn dummy() -> ShmGroup {
    let job = job();
    let own = ShmSegment::create(&format!("{job}-0"), ShmGroup::segment_bytes(BUFFER)).unwrap();
    ShmGroup::new(0, 1, own, vec![None], Duration::from_secs(1)).unwrap()
}

#[test]
fn a_peer_abort_fails_waiters_within_a_second_naming_it() {
    let out = with_group(3, Duration::from_secs(30), |rank, g| {
        g.step_all(&fp(0, 1)).unwrap();
        if rank == 2 {
            std::thread::sleep(Duration::from_millis(200));
            g.abort("rank 2 ran out of memory");
            return (Duration::ZERO, None);
        }
        let t = Instant::now();
        let e = g.step_all(&fp(1, 1)).unwrap_err();
        (t.elapsed(), Some(e))
    });
    for (rank, (took, e)) in out.into_iter().enumerate().take(2) {
        let e = e.unwrap();
        assert!(took < Duration::from_secs(1), "rank {rank} took {took:?}");
        assert!(
            e.to_string().contains("ran out of memory"),
            "rank {rank}: {e}"
        );
        // Rank 0 may first wait on rank 1, which fails and re-publishes the root cause.
        assert!(matches!(e, Error::PeerAborted { .. }), "rank {rank}: {e}");
    }
}

#[test]
fn an_abort_handle_stops_a_blocked_wait_from_another_thread() {
    let out = with_group(2, Duration::from_secs(30), |rank, g| {
        let handle = g.abort_handle();
        std::thread::scope(|s| {
            if rank == 0 {
                s.spawn(move || {
                    std::thread::sleep(Duration::from_millis(150));
                    handle.abort("watchdog: store lost");
                });
            }
            g.step_all(&fp(0, 1)).unwrap();
            if rank == 1 {
                // Late for step 2, so rank 0 blocks there until its own handle aborts.
                std::thread::sleep(Duration::from_millis(400));
            }
            let t = Instant::now();
            // Rank 0 published step 2 before it blocked, so rank 1 fails one step later.
            let e = g
                .step_all(&fp(1, 1))
                .and_then(|()| g.step_all(&fp(2, 1)))
                .unwrap_err();
            (t.elapsed(), e)
        })
    });
    let (took0, e0) = &out[0];
    assert!(*took0 < Duration::from_secs(1), "{took0:?}");
    assert!(
        matches!(e0, Error::Aborted { reason } if reason.contains("watchdog")),
        "{e0}"
    );
    let (_, e1) = &out[1];
    assert!(
        matches!(e1, Error::PeerAborted { peer: 0, reason } if reason.contains("watchdog")),
        "{e1}"
    );
}

#[test]
fn a_silent_peer_times_out_naming_it() {
    let out = with_group(3, Duration::from_millis(300), |rank, g| {
        if rank == 1 {
            // Silent until the others have given up.
            std::thread::sleep(Duration::from_millis(800));
            return None;
        }
        let t = Instant::now();
        let e = g.step_all(&fp(0, 1)).unwrap_err();
        Some((t.elapsed(), e))
    });
    let (took, e) = out[0].as_ref().unwrap();
    assert!(
        *took >= Duration::from_millis(300) && *took < Duration::from_secs(2),
        "{took:?}"
    );
    match e {
        Error::Timeout { waiting_for, .. } => assert_eq!(waiting_for, &vec![1]),
        other => panic!("expected a timeout, got {other}"),
    }
    assert!(e.to_string().contains("allreduce #0"), "{e}");
}

#[test]
fn mismatched_fingerprints_name_both_sides() {
    let out = with_group(2, Duration::from_secs(10), |rank, g| {
        g.step_all(&fp(0, 10)).unwrap();
        g.step_all(&fp(1, 10 + rank as u64)).unwrap_err()
    });
    for (rank, e) in out.iter().enumerate() {
        match e {
            Error::Mismatch {
                me,
                peer,
                ours,
                theirs,
            } => {
                assert_eq!((*me, *peer), (rank, 1 - rank));
                assert_eq!(
                    (ours.count, theirs.count),
                    (10 + rank as u64, 11 - rank as u64)
                );
            }
            other => panic!("rank {rank}: {other}"),
        }
    }
}

#[test]
fn layouts_that_disagree_are_refused() {
    let job = job();
    let a = ShmSegment::create(&format!("{job}-0"), ShmGroup::segment_bytes(BUFFER)).unwrap();
    let b = ShmSegment::create(&format!("{job}-1"), ShmGroup::segment_bytes(2 * BUFFER)).unwrap();
    let b_view =
        ShmSegment::open(&format!("{job}-1"), ShmGroup::segment_bytes(2 * BUFFER)).unwrap();
    let a_view = ShmSegment::open(&format!("{job}-0"), ShmGroup::segment_bytes(BUFFER)).unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(move || {
            ShmGroup::new(1, 2, b, vec![Some(a_view), None], Duration::from_secs(2))
        });
        let e =
            ShmGroup::new(0, 2, a, vec![None, Some(b_view)], Duration::from_secs(2)).unwrap_err();
        assert!(e.to_string().contains("8192"), "{e}");
        assert!(h.join().unwrap().is_err());
    });
}

/// The child side of `a_dead_peer_process_is_detected`: does nothing unless started by it.
#[test]
fn child_rank() {
    let Ok(job) = std::env::var(CHILD_ENV) else {
        return;
    };
    let bytes = ShmGroup::segment_bytes(BUFFER);
    let own = ShmSegment::create(&format!("{job}-1"), bytes).unwrap();
    let mut g = join(&job, 1, 2, own, Duration::from_secs(20));
    g.step_all(&fp(0, 1)).unwrap();
    // Exit without dropping the group (no goodbye, as in a crash); the parent removes the
    // segment file.
    std::process::exit(0);
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_dead_peer_process_is_detected_within_a_second() {
    let job = job();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_rank", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &job)
        .spawn()
        .unwrap();
    let _child = KillOnDrop(child);
    let own = ShmSegment::create(&format!("{job}-0"), ShmGroup::segment_bytes(BUFFER)).unwrap();
    // A long timeout: only the liveness check can end the second wait early.
    let mut g = join(&job, 0, 2, own, Duration::from_secs(60));
    g.step_all(&fp(0, 1)).unwrap();
    let t = Instant::now();
    let e = g.step_all(&fp(1, 1)).unwrap_err();
    // The child exits right after its step; it is not reaped until `_child` drops, so this
    // also covers zombies.
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    match &e {
        Error::PeerExited { peer, pid, .. } => {
            assert_eq!(*peer, 1);
            assert_ne!(*pid, 0);
            assert!(e.to_string().contains("exited"), "{e}");
        }
        other => panic!("expected PeerExited, got {other}"),
    }
    let _ = std::fs::remove_file(format!("/dev/shm/{job}-1"));
}

#[test]
fn a_rank_that_leaves_early_fails_its_waiters_but_not_finished_ones() {
    let out = with_group(3, Duration::from_secs(30), |rank, g| {
        g.step_all(&fp(0, 1)).unwrap();
        match rank {
            // Leaves (drops its group) after step 1: nobody may wait for it afterwards.
            2 => Ok(()),
            // Slow but present: rank 0's last wait must survive rank 2 leaving.
            1 => {
                std::thread::sleep(Duration::from_millis(300));
                g.publish(&fp(1, 1)).unwrap();
                Ok(())
            }
            _ => {
                g.publish(&fp(1, 1)).unwrap();
                let r = g.wait_for(1, &fp(1, 1));
                // Step 2 of rank 2 never comes.
                r.and_then(|()| g.wait_for(2, &fp(1, 1)))
            }
        }
    });
    match &out[0] {
        Err(Error::PeerAborted { peer: 2, reason }) => assert!(reason.contains("left"), "{reason}"),
        other => panic!("rank 0: {other:?}"),
    }
}
