//! `phalanx bench allreduce` (and broadcast, reduce, allgather, reduce_scatter, all_to_all)
//! through the real binary: self-launch, --check over sizes from 0 bytes to 64 MiB on 3
//! ranks, JSON output, and launch of a one-barrier job.

mod launch_util;

use std::time::Duration;

use launch_util::{phalanx, run};

#[test]
fn check_passes_on_three_ranks_from_0_bytes_to_64_mib() {
    let mut cmd = phalanx();
    cmd.args([
        "bench",
        "allreduce",
        "--nproc-per-node",
        "3",
        "--standalone",
        "--check",
        "--iters",
        "2",
        "--warmup",
        "1",
        "--sizes",
        "0,4,12,4K,100000,1M,64M",
    ]);
    let f = run(cmd, Duration::from_secs(120));
    assert_eq!(
        f.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        f.stdout,
        f.stderr
    );
    let rows: Vec<&str> = f
        .stdout
        .lines()
        .filter(|l| l.trim_end().ends_with(" ok"))
        .collect();
    assert_eq!(rows.len(), 7, "{}", f.stdout);
    assert!(f.stdout.contains("3 ranks"), "{}", f.stdout);
}

#[test]
fn json_has_one_object_per_size_for_every_dtype() {
    for dtype in ["f32", "bf16", "i64"] {
        let mut cmd = phalanx();
        cmd.args([
            "bench",
            "allreduce",
            "--nproc-per-node",
            "2",
            "--standalone",
            "--json",
            "--check",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--sizes",
            "4K,64K",
            "--dtype",
            dtype,
        ]);
        let f = run(cmd, Duration::from_secs(60));
        assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
        let objs: Vec<&str> = f
            .stdout
            .lines()
            .filter(|l| l.contains("\"op\":\"allreduce\""))
            .collect();
        assert_eq!(objs.len(), 2, "{}", f.stdout);
        for o in objs {
            for field in [
                "\"world\":2",
                &format!("\"dtype\":\"{dtype}\""),
                "\"median_s\":",
                "\"busbw_gbps\":",
                "\"check\":\"ok\"",
            ] {
                assert!(o.contains(field), "{field} missing in {o}");
            }
        }
    }
}

#[test]
fn launch_of_a_tiny_job_is_fast_and_clean() {
    let mut cmd = phalanx();
    cmd.args([
        "launch",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--",
        env!("CARGO_BIN_EXE_phalanx"),
        "bench",
        "allreduce",
        "--sizes",
        "4",
        "--iters",
        "1",
    ]);
    // The target (well under a second) is measured by benchmarks; this only bounds a hang.
    let f = run(cmd, Duration::from_secs(30));
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    assert!(f.stdout.contains("[rank 0]:"), "{}", f.stdout);
}

#[test]
fn bad_flags_name_the_culprit() {
    let mut cmd = phalanx();
    cmd.args(["bench", "allreduce", "--sizes", "4Q"]);
    let f = run(cmd, Duration::from_secs(10));
    assert_ne!(f.code(), Some(0));
    assert!(f.stderr.contains("4Q"), "{}", f.stderr);
    let mut cmd = phalanx();
    cmd.args(["bench", "allreduce", "--dtype", "f8"]);
    let f = run(cmd, Duration::from_secs(10));
    assert_ne!(f.code(), Some(0));
    assert!(f.stderr.contains("f8"), "{}", f.stderr);
}

#[test]
fn every_collective_bench_checks_its_results_on_three_ranks() {
    for op in [
        "broadcast",
        "reduce",
        "allgather",
        "reduce_scatter",
        "all_to_all",
    ] {
        let mut cmd = phalanx();
        cmd.args([
            "bench",
            op,
            "--nproc-per-node",
            "3",
            "--standalone",
            "--check",
            "--json",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--sizes",
            "0,12,4K,100000,1M",
        ]);
        let f = run(cmd, Duration::from_secs(120));
        assert_eq!(f.code(), Some(0), "{op}\n{}\n{}", f.stdout, f.stderr);
        let rows: Vec<serde_json::Value> = f
            .stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        assert_eq!(rows.len(), 5, "{op}: {}", f.stdout);
        for row in rows {
            assert_eq!(row["op"], op, "{row}");
            assert_eq!(row["check"], "ok", "{row}");
            assert_eq!(row["world"], 3, "{row}");
        }
    }
}
