//! `--rdzv-backend etcd` against a real 3-member etcd cluster (Debian's etcd-server, started by
//! the test on loopback, `phalanx_testing::etcd`): the job's store lives in etcd, the result is
//! bitwise the static job's, the keys go when the job ends, and bad input gets a sentence.

mod launch_util;

use std::process::Command;
use std::time::{Duration, Instant};

use launch_util::*;
use phalanx_store::Store;
use phalanx_testing::etcd::EtcdCluster;

const DEADLINE: Duration = Duration::from_secs(120);
const TOKEN: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const OTHER_TOKEN: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

/// `phalanx train` on one node of an etcd-backed job of `nnodes` nodes × 1 rank.
fn etcd_node(endpoints: &str, id: &str, token: &str, extra: &[&str]) -> Command {
    let mut c = phalanx();
    c.arg("train")
        .args(["--rdzv-backend", "etcd", "--rdzv-endpoint", endpoints])
        .args(["--rdzv-id", id, "--nnodes", "2", "--nproc-per-node", "1"])
        .args([
            "--dataset",
            "digits",
            "--epochs",
            "1",
            "--hidden",
            "32",
            "--json",
        ])
        .args(extra)
        .env("PHALANX_TOKEN", token)
        .env("PHALANX_TIMEOUT", "60s");
    c
}

#[test]
fn two_agents_through_etcd_end_bitwise_equal_to_one_host_and_leave_no_keys() {
    let Some(cluster) = EtcdCluster::start("launch_etcd_digest", 3, Duration::from_secs(30)) else {
        return;
    };
    let eps = cluster.endpoints();
    let agents: Vec<Running> = (0..2)
        .map(|_| start(etcd_node(&eps, "digest-job", TOKEN, &[])))
        .collect();
    let nodes: Vec<Finished> = agents.into_iter().map(|a| a.wait(DEADLINE)).collect();
    for f in &nodes {
        assert_eq!(
            f.code(),
            Some(0),
            "stdout:\n{}\nstderr:\n{}",
            f.stdout,
            f.stderr
        );
    }
    let mut node_ranks: Vec<&str> = nodes
        .iter()
        .flat_map(|f| f.stderr.lines())
        .filter_map(|l| l.split("this is node ").nth(1))
        .collect();
    node_ranks.sort();
    assert_eq!(
        node_ranks,
        ["0", "1"],
        "each agent takes one node rank on arrival"
    );
    let summaries: Vec<(u64, f64, String)> = nodes
        .iter()
        .flat_map(|f| train_summaries(&f.stdout))
        .collect();
    assert_eq!(summaries.len(), 2, "{summaries:?}");
    let reference = train_ok(
        &[
            "--nproc-per-node",
            "2",
            "--dataset",
            "digits",
            "--epochs",
            "1",
            "--hidden",
            "32",
        ],
        DEADLINE,
    );
    let want = train_summaries(&reference.stdout);
    for (rank, _, digest) in &summaries {
        assert_eq!(
            digest, &want[0].2,
            "rank {rank} through etcd vs 1 host x 2 ranks"
        );
    }
    // The last agent out removed the job's keys (and the receipts beside them).
    let store = cluster.store("digest-job");
    assert_eq!(
        store.num_keys().unwrap(),
        0,
        "keys left in etcd under /phalanx/digest-job/"
    );
    assert!(
        nodes.iter().any(|f| f
            .stderr
            .contains("keys were removed from etcd (/phalanx/digest-job/)")),
        "{}",
        nodes[1].stderr
    );
}

#[test]
fn a_second_job_under_the_same_id_is_refused_with_a_sentence() {
    let Some(cluster) = EtcdCluster::start("launch_etcd_two_jobs", 1, Duration::from_secs(30))
    else {
        return;
    };
    let eps = cluster.endpoints();
    // The first job's node waits for its second node, holding the id.
    let first = start(etcd_node(&eps, "shared-id", TOKEN, &[]));
    let store = cluster.store("shared-id");
    let t = Instant::now();
    while !store.check(&["rdzv/etcd/job"]).unwrap() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the first job never arrived"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let f = run(etcd_node(&eps, "shared-id", OTHER_TOKEN, &[]), DEADLINE);
    assert_ne!(f.code(), Some(0), "{f:?}");
    assert!(
        f.stderr.contains("--rdzv-id")
            && f.stderr
                .contains("\"shared-id\" is already another job's in etcd at")
            && f.stderr.contains(&eps)
            && f.stderr
                .contains("etcdctl del --prefix /phalanx/shared-id/"),
        "{}",
        f.stderr
    );
    drop(first);
}

#[test]
fn bad_rendezvous_input_is_named() {
    // No endpoint.
    let f = run(launch_sh(&["--rdzv-backend", "etcd"], "true"), DEADLINE);
    assert!(
        f.stderr.contains("etcd needs --rdzv-endpoint HOST:PORT"),
        "{}",
        f.stderr
    );
    // An endpoint without a port.
    let f = run(
        launch_sh(
            &["--rdzv-backend", "etcd", "--rdzv-endpoint", "h1:2379,h2"],
            "true",
        ),
        DEADLINE,
    );
    assert!(
        f.stderr.contains("etcd endpoint \"h2\" is not host:port"),
        "{}",
        f.stderr
    );
    // An unknown --rdzv-conf key, and an etcd key on another backend.
    let f = run(
        launch_sh(
            &[
                "--rdzv-backend",
                "etcd",
                "--rdzv-endpoint",
                "h:2379",
                "--rdzv-conf",
                "cafile=x",
            ],
            "true",
        ),
        DEADLINE,
    );
    assert!(
        f.stderr.contains("unknown key \"cafile\"") && f.stderr.contains("cacert"),
        "{}",
        f.stderr
    );
    let f = run(
        launch_sh(
            &[
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                "h:29400",
                "--rdzv-conf",
                "user=u,password=p",
            ],
            "true",
        ),
        DEADLINE,
    );
    assert!(
        f.stderr
            .contains("user, password apply only to --rdzv-backend etcd"),
        "{}",
        f.stderr
    );
    // Endpoints that never answer: named, after the rendezvous timeout.
    let (a, b) = (free_port(), free_port());
    let eps = format!("127.0.0.1:{a},127.0.0.1:{b}");
    let t = Instant::now();
    let f = run(
        launch_sh(
            &[
                "--rdzv-backend",
                "etcd",
                "--rdzv-endpoint",
                &eps,
                "--rdzv-conf",
                "timeout=2",
            ],
            "true",
        ),
        DEADLINE,
    );
    assert_ne!(f.code(), Some(0));
    assert!(
        f.stderr.contains(&format!("etcd at {eps}"))
            && f.stderr.contains("no member answered within 2s"),
        "{}",
        f.stderr
    );
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}
