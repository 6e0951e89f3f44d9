//! `phalanx doctor` through the real binary on one host: the text report (ranks, links,
//! shared memory, verdict), `--json`, a failing check's exit status, and bad flags named.

mod launch_util;

use std::time::Duration;

use launch_util::{phalanx, run};

const DEADLINE: Duration = Duration::from_secs(60);

fn doctor(flags: &[&str]) -> launch_util::Finished {
    let mut cmd = phalanx();
    cmd.arg("doctor").args(flags);
    run(cmd, DEADLINE)
}

fn json(flags: &[&str]) -> serde_json::Value {
    let f = doctor(flags);
    assert_eq!(
        f.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        f.stdout,
        f.stderr
    );
    serde_json::from_str(&f.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{}", f.stdout))
}

#[test]
fn three_local_ranks_report_ranks_links_shm_and_the_slowest_link() {
    let f = doctor(&["--standalone", "--nproc-per-node", "3"]);
    assert_eq!(
        f.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        f.stdout,
        f.stderr
    );
    let out = &f.stdout;
    assert!(out.contains("phalanx doctor: 3 ranks on 1 node"), "{out}");
    // One row per rank: rank, node 0, local rank, on the loopback address.
    for r in 0..3 {
        let row = out
            .lines()
            .find(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 4 && w[..3] == [r.to_string(), "0".into(), r.to_string()]
            })
            .unwrap_or_else(|| panic!("no row for rank {r}:\n{out}"));
        assert!(row.contains("127.0.0.1:"), "{row}");
        assert!(row.contains("GiB free"), "{row}");
    }
    // Every pair of ranks, measured both ways.
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        let row = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{a} ↔ {b} ")))
            .unwrap_or_else(|| panic!("no link {a} ↔ {b}:\n{out}"));
        assert_eq!(row.matches("Gbit/s").count(), 2, "{row}");
        assert!(row.contains("µs"), "{row}");
        assert!(row.contains("ok"), "{row}");
    }
    for check in [
        "interfaces",
        "reachability",
        "links",
        "process group",
        "shared memory",
        "clock",
    ] {
        let line = out
            .lines()
            .find(|l| l.contains(&format!(" {check} ")))
            .unwrap_or_else(|| panic!("no check {check}:\n{out}"));
        assert!(line.trim_start().starts_with("ok"), "{line}");
    }
    assert!(out.contains("6 of 6 directions connected"), "{out}");
    assert!(out.contains("the group uses shared memory"), "{out}");
    let verdict = out
        .lines()
        .find(|l| l.starts_with("slowest link: rank "))
        .unwrap_or_else(|| panic!("no verdict:\n{out}"));
    assert!(
        verdict.contains(" ↔ rank ") && verdict.contains("Gbit/s"),
        "{verdict}"
    );
    assert!(verdict.contains("µs RTT"), "{verdict}");
    assert!(out.trim_end().ends_with("verdict: ok"), "{out}");
    // Workers print nothing of their own: the report is printed once, by this process.
    assert_eq!(out.matches("phalanx doctor:").count(), 1, "{out}");
    assert!(!out.contains("[rank "), "{out}");
    // Two cores shared with other jobs: generous, but a doctor must stay a quick preflight.
    assert!(f.elapsed < Duration::from_secs(10), "took {:?}", f.elapsed);
}

#[test]
fn json_is_one_object_with_every_rank_and_link() {
    let v = json(&["--standalone", "--nproc-per-node", "2", "--json"]);
    assert_eq!(v["world_size"], 2, "{v:#}");
    assert_eq!(v["nnodes"], 1, "{v:#}");
    assert_eq!(v["ok"], true, "{v:#}");
    let ranks = v["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    for (i, r) in ranks.iter().enumerate() {
        assert_eq!(r["rank"], i, "{r:#}");
        assert_eq!(r["ifname"], "lo", "{r:#}");
        assert_eq!(r["ip"], "127.0.0.1", "{r:#}");
        assert!(r["port"].as_u64().unwrap() > 0, "{r:#}");
        assert!(r["shm"]["error"].is_null(), "{r:#}");
        assert_eq!(r["uses_shared_memory"], true, "{r:#}");
        assert!(r["clock_offset_us"].as_f64().is_some(), "{r:#}");
    }
    let links = v["links"].as_array().unwrap();
    assert_eq!(links.len(), 1);
    let l = &links[0];
    assert_eq!((l["a"].as_u64(), l["b"].as_u64()), (Some(0), Some(1)));
    assert_eq!(l["reachable"], true);
    assert!(l["a_to_b_gbps"].as_f64().unwrap() > 0.0, "{l:#}");
    assert!(l["b_to_a_gbps"].as_f64().unwrap() > 0.0, "{l:#}");
    let rtt = &l["rtt"];
    assert!(rtt["min_us"].as_f64().unwrap() > 0.0, "{rtt:#}");
    assert!(rtt["median_us"].as_f64().unwrap() >= rtt["min_us"].as_f64().unwrap());
    assert_eq!(v["slowest_link"], serde_json::json!([0, 1]));
    assert!(
        v["verdict"]
            .as_str()
            .unwrap()
            .starts_with("slowest link: rank 0"),
        "{v:#}"
    );
    let checks = v["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 6);
    assert!(checks.iter().all(|c| c["status"] == "ok"), "{checks:#?}");
}

#[test]
fn one_rank_has_no_links_and_passes() {
    let v = json(&["--standalone", "--json"]);
    assert_eq!(v["world_size"], 1);
    assert_eq!(v["links"].as_array().unwrap().len(), 0);
    assert_eq!(v["ok"], true);
    assert_eq!(v["verdict"], "no links to measure (1 rank)");
}

#[test]
fn a_failed_check_exits_non_zero_and_names_it() {
    // Bandwidth no loopback link reaches: the links check fails, naming every pair.
    let f = doctor(&[
        "--standalone",
        "--nproc-per-node",
        "2",
        "--min-bandwidth",
        "100000gbit",
    ]);
    assert_eq!(
        f.code(),
        Some(1),
        "stdout:\n{}\nstderr:\n{}",
        f.stdout,
        f.stderr
    );
    let line = f
        .stdout
        .lines()
        .find(|l| l.contains(" links "))
        .unwrap_or_else(|| panic!("no links check:\n{}", f.stdout));
    assert!(line.trim_start().starts_with("FAIL"), "{line}");
    assert!(
        line.contains("below --min-bandwidth") && line.contains("rank 0 ↔ rank 1"),
        "{line}"
    );
    assert!(f.stdout.contains("FAILED (links)"), "{}", f.stdout);
    assert!(
        f.stdout.trim_end().ends_with("verdict: FAILED"),
        "{}",
        f.stdout
    );
}

#[test]
fn an_interface_that_matches_nothing_fails_naming_the_spec() {
    let mut cmd = phalanx();
    cmd.args(["doctor", "--standalone", "--nproc-per-node", "2"])
        .env("PHALANX_SOCKET_IFNAME", "=bogus0");
    let f = run(cmd, DEADLINE);
    assert_eq!(
        f.code(),
        Some(1),
        "stdout:\n{}\nstderr:\n{}",
        f.stdout,
        f.stderr
    );
    let line = f
        .stdout
        .lines()
        .find(|l| l.contains(" interfaces "))
        .unwrap_or_else(|| panic!("no interfaces check:\n{}", f.stdout));
    assert!(line.trim_start().starts_with("FAIL"), "{line}");
    assert!(line.contains("rank 0") && line.contains("bogus0"), "{line}");
    // No address: nothing can be reached, and the real group is not started.
    assert!(f.stdout.contains("rank 0 has no address"), "{}", f.stdout);
    assert!(f.stdout.contains("not started"), "{}", f.stdout);
    assert!(f.elapsed < Duration::from_secs(20), "took {:?}", f.elapsed);
}

#[test]
fn bad_flags_are_named() {
    let f = doctor(&["--standalone", "--bandwith-time", "1s"]);
    assert_eq!(f.code(), Some(2), "{}", f.stderr);
    assert!(f.stderr.contains("--bandwith-time"), "{}", f.stderr);
    let f = doctor(&["--standalone", "--min-bandwidth", "fast"]);
    assert_eq!(f.code(), Some(2), "{}", f.stderr);
    assert!(
        f.stderr.contains("--min-bandwidth") && f.stderr.contains("fast"),
        "{}",
        f.stderr
    );
    let f = doctor(&["--standalone", "--nnodes", "2"]);
    assert_eq!(f.code(), Some(1), "{}", f.stderr);
    assert!(f.stderr.contains("--standalone"), "{}", f.stderr);
}

#[test]
fn under_phalanx_launch_rank_0_prints_and_fails_with_the_check() {
    let exe = env!("CARGO_BIN_EXE_phalanx");
    let mut cmd = phalanx();
    cmd.args([
        "launch",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--",
        exe,
        "doctor",
    ]);
    let ok = run(cmd, DEADLINE);
    assert_eq!(
        ok.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        ok.stdout,
        ok.stderr
    );
    assert!(ok.stdout.contains("[rank 0]: verdict: ok"), "{}", ok.stdout);
    assert!(!ok.stdout.contains("[rank 1]:"), "{}", ok.stdout);
    let mut cmd = phalanx();
    cmd.args([
        "launch",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--",
        exe,
        "doctor",
    ])
    .args(["--min-bandwidth", "100000gbit"]);
    let bad = run(cmd, DEADLINE);
    assert_eq!(
        bad.code(),
        Some(1),
        "stdout:\n{}\nstderr:\n{}",
        bad.stdout,
        bad.stderr
    );
    assert!(
        bad.stdout.contains("[rank 0]: verdict: FAILED"),
        "{}",
        bad.stdout
    );
}
