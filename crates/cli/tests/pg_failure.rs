//! Failures of real process-group workers under the real launcher: a SIGKILLed rank in the
//! middle of collectives is named, and every process is gone, within 2 s.

mod launch_util;

use std::time::Duration;

use launch_util::{alive, kill_mid_run, phalanx};

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
    let k = kill_mid_run(
        cmd,
        3,
        1,
        Duration::from_millis(500),
        Duration::from_secs(20),
    );
    let f = &k.finished;
    assert!(
        k.took < Duration::from_secs(2),
        "launcher took {:?} to exit\n{}",
        k.took,
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
    assert!(k.left.is_empty());
    assert!(!alive(k.victim));
}
