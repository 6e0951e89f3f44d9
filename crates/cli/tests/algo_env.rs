//! `PHALANX_ALGO` through the real binary: a value it does not know stops every rank with a
//! sentence naming the variable, and `hierarchical` on one host (where it does not apply: the
//! ranks share memory) still runs and checks; the threshold variables are applied and a bad
//! value is named.

mod launch_util;

use std::time::Duration;

use launch_util::{phalanx, run};

fn bench(algo: &str) -> launch_util::Finished {
    bench_env(&[("PHALANX_ALGO", algo)])
}

fn bench_env(env: &[(&str, &str)]) -> launch_util::Finished {
    let mut cmd = phalanx();
    cmd.envs(env.iter().copied()).args([
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

#[test]
fn direct_max_bytes_moves_small_messages_to_the_ring() {
    let f = bench_env(&[
        ("PHALANX_SHM_DISABLE", "1"),
        ("PHALANX_DIRECT_MAX_BYTES", "0"),
        ("PHALANX_CHUNK_BYTES", "64K"),
        ("PHALANX_DEBUG", "INFO"),
    ]);
    assert_eq!(
        f.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        f.stdout,
        f.stderr
    );
    let algos: Vec<&str> = f
        .stderr
        .lines()
        .filter(|l| l.contains("phalanx: algorithm") && l.contains("collective=\"allreduce\""))
        .collect();
    assert!(!algos.is_empty(), "{}", f.stderr);
    assert!(
        algos.iter().all(|l| l.contains("algorithm=Ring")
            && l.contains("direct_max_bytes=0")
            && l.contains("chunk_bytes=65536")),
        "{algos:#?}"
    );
}

#[test]
fn bad_threshold_is_named() {
    let f = bench_env(&[("PHALANX_CHUNK_BYTES", "lots")]);
    assert_ne!(f.code(), Some(0), "{}", f.stdout);
    assert!(
        f.stderr.contains("PHALANX_CHUNK_BYTES") && f.stderr.contains("\"lots\""),
        "{}",
        f.stderr
    );
}
