//! Failures of real process-group workers under the real launcher: a SIGKILLed rank in the
//! middle of collectives is named, and every process is gone, within 2 s.

mod launch_util;

use std::time::{Duration, Instant};

use launch_util::{alive, phalanx, start, survivors, wait_for_workers};

#[test]
fn sigkill_of_a_rank_in_allreduce_is_named_within_two_seconds() {
    let mut cmd = phalanx();
    cmd.args([
        "bench",
        "allreduce",
        "--nproc-per-node",
        "3",
        "--standalone",
        "--sizes",
        "1M",
        "--iters",
        "1000000",
        "--warmup",
        "0",
    ]);
    let run = start(cmd);
    let procs = wait_for_workers(run.pid(), 3);
    std::thread::sleep(Duration::from_millis(500));
    let (victim, _) = procs.iter().copied().find(|(_, r)| *r == 1).unwrap();
    let killed_at = Instant::now();
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let f = run.wait(Duration::from_secs(20));
    let took = killed_at.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "launcher took {took:?} to exit\n{}",
        f.stderr
    );
    assert_ne!(f.code(), Some(0));
    assert!(
        f.stderr.contains("rank 1") || f.stdout.contains("rank 1"),
        "rank 1 not named:\n{}\n{}",
        f.stdout,
        f.stderr
    );
    assert!(
        f.stderr.to_uppercase().contains("SIGKILL") || f.stderr.contains("signal 9"),
        "{}",
        f.stderr
    );
    let pids: Vec<i32> = procs.iter().map(|(p, _)| *p).collect();
    assert!(survivors(&pids, Duration::from_secs(1)).is_empty());
    assert!(!alive(victim));
}
