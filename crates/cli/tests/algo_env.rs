//! `PHALANX_ALGO` through the real binary: a value it does not know stops every rank with a
//! sentence naming the variable, and `hierarchical` on one host (where it does not apply: the
//! ranks share memory) still runs and checks.

mod launch_util;

use std::time::Duration;

use launch_util::{phalanx, run};

fn bench(algo: &str) -> launch_util::Finished {
    let mut cmd = phalanx();
    cmd.env("PHALANX_ALGO", algo).args([
        "bench",
        "allreduce",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--sizes",
        "4,1M",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--check",
    ]);
    run(cmd, Duration::from_secs(60))
}

#[test]
fn unknown_algorithm_is_named() {
    let f = bench("ringy");
    assert_ne!(f.code(), Some(0), "{}", f.stdout);
    assert!(
        f.stderr.contains("PHALANX_ALGO")
            && f.stderr.contains("\"ringy\"")
            && f.stderr.contains("hierarchical"),
        "{}",
        f.stderr
    );
}

#[test]
fn hierarchical_on_one_host_falls_back_and_checks() {
    let f = bench("hierarchical");
    assert_eq!(
        f.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        f.stdout,
        f.stderr
    );
    assert_eq!(
        f.stdout
            .lines()
            .filter(|l| l.trim_end().ends_with(" ok"))
            .count(),
        2,
        "{}",
        f.stdout
    );
}
