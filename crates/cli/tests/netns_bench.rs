//! Multi-host allreduce over real TCP between network namespaces: one `phalanx launch` node
//! agent per simulated host, `phalanx bench allreduce --check` as the program, every element
//! verified on every rank. Skipped with a printed reason without root and `ip netns`.

mod netns_util;

use std::time::Duration;

use netns_util::{assert_all_ok, run_all, Hosts, Net};

const DEADLINE: Duration = Duration::from_secs(120);

/// Runs `phalanx launch … -- phalanx bench allreduce --check` on `hosts` hosts × `nproc`
/// ranks and returns rank 0's JSON rows.
fn bench_check(test: &str, hosts: usize, nproc: usize) -> Option<Vec<String>> {
    bench_check_env(test, hosts, nproc, &[]).map(|(rows, _)| rows)
}

/// [`bench_check`] with extra variables for every process; also returns host 0's stderr.
fn bench_check_env(
    test: &str,
    hosts: usize,
    nproc: usize,
    env: &[(&str, &str)],
) -> Option<(Vec<String>, String)> {
    let h = Hosts::up(test, hosts, &Net::default())?;
    let cmds = (0..hosts)
        .map(|i| {
            let mut c = h.phalanx(i);
            c.envs(env.iter().copied());
            c.arg("launch")
                .args(h.launch_flags(hosts, i, nproc))
                .args(["--", env!("CARGO_BIN_EXE_phalanx"), "bench", "allreduce"])
                .args(["--sizes", "0,4,4K,100000,1M,16M", "--iters", "2"])
                .args(["--warmup", "1", "--check", "--json"]);
            c
        })
        .collect();
    let nodes = run_all(cmds, DEADLINE);
    assert_all_ok(&nodes);
    // Rank 0 lives on host 0 and prints one JSON object per size.
    let rows: Vec<String> = nodes[0]
        .stdout
        .lines()
        .filter_map(|l| l.split_once("]: ").map(|(_, b)| b.to_string()))
        .filter(|b| b.starts_with('{'))
        .collect();
    Some((rows, nodes[0].stderr.clone()))
}

fn assert_rows(rows: &[String], world: usize) {
    assert_eq!(rows.len(), 6, "{rows:#?}");
    for (row, bytes) in rows.iter().zip([0, 4, 4096, 100_000, 1 << 20, 16 << 20]) {
        assert!(row.contains(&format!("\"world\":{world},")), "{row}");
        assert!(row.contains(&format!("\"bytes\":{bytes},")), "{row}");
        assert!(row.contains("\"check\":\"ok\""), "{row}");
    }
}

#[test]
fn needs_root_netns_bench_allreduce_check_2_hosts_x_1_rank() {
    let Some(rows) = bench_check(
        "needs_root_netns_bench_allreduce_check_2_hosts_x_1_rank",
        2,
        1,
    ) else {
        return;
    };
    assert_rows(&rows, 2);
}

#[test]
fn needs_root_netns_bench_allreduce_check_2_hosts_x_2_ranks() {
    let Some(rows) = bench_check(
        "needs_root_netns_bench_allreduce_check_2_hosts_x_2_ranks",
        2,
        2,
    ) else {
        return;
    };
    assert_rows(&rows, 4);
}

/// `PHALANX_ALGO=hierarchical` on 2 hosts × 2 ranks: every rank logs the two-level choice, the
/// ranks of a host join a shared-memory group of two, and every element of every size is right (integer-valued data: exact under any grouping).
#[test]
fn needs_root_netns_bench_allreduce_check_hierarchical_2_hosts_x_2_ranks() {
    let Some((rows, stderr)) = bench_check_env(
        "needs_root_netns_bench_allreduce_check_hierarchical_2_hosts_x_2_ranks",
        2,
        2,
        &[("PHALANX_ALGO", "hierarchical"), ("PHALANX_DEBUG", "INFO")],
    ) else {
        return;
    };
    assert_rows(&rows, 4);
    let chose = stderr
        .lines()
        .filter(|l| l.contains("allreduce inside hosts, then across them"))
        .count();
    assert_eq!(
        chose, 2,
        "host 0's two ranks should log the choice:\n{stderr}"
    );
}
