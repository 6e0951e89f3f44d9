//! Islands across a slow link (docs/outer.md): 2 simulated hosts (network namespaces) × 2
//! ranks, each host's link capped at 50 Mbit/s each way by HTB, one island per host. DiLoCo
//! ends with the same parameters on all 4 ranks and moves a small share of DDP's bytes across
//! the link (host 0's interface counters, both directions, everything included). The speed is
//! bench/wan_outer.sh's to measure, not a test's.
//!
//! Skipped with a printed reason without root and `ip netns`.

mod netns_util;

use std::time::Duration;

use netns_util::{assert_all_ok, run_all, Hosts, Net, PORT};

const DEADLINE: Duration = Duration::from_secs(240);

/// One run on the 2 hosts with `flags`: every rank's digest, and the bytes host 0's link moved.
fn train(h: &Hosts, port: u16, flags: &[&str]) -> (Vec<String>, u64) {
    let bytes = || h.counter(0, "eth0", "tx_bytes") + h.counter(0, "eth0", "rx_bytes");
    let before = bytes();
    let cmds = (0..2)
        .map(|i| {
            let mut c = h.phalanx(i);
            c.arg("train")
                .args(h.launch_flags_at(port, 2, i, 2))
                .args(["--model", "cnn", "--dataset", "mnist5k", "--epochs", "1"])
                .args(["--batch-size", "32", "--optimizer", "adam", "--lr", "0.001"])
                .arg("--json")
                .args(flags);
            c
        })
        .collect();
    let nodes = run_all(cmds, DEADLINE);
    assert_all_ok(&nodes);
    let digests = nodes
        .iter()
        .flat_map(|f| f.stdout.lines())
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "summary")
        .map(|v| v["param_digest"].as_str().unwrap().to_string())
        .collect();
    (digests, bytes() - before)
}

#[test]
fn needs_root_netns_diloco_across_a_capped_link_moves_a_tenth_of_ddps_bytes() {
    let test = "needs_root_netns_diloco_across_a_capped_link_moves_a_tenth_of_ddps_bytes";
    let net = Net {
        rate: Some("50mbit".into()),
        htb: true,
        ..Net::default()
    };
    let Some(h) = Hosts::up(test, 2, &net) else {
        return;
    };
    let (ddp, ddp_bytes) = train(&h, PORT, &[]);
    assert_eq!(ddp.len(), 4, "{ddp:?}");
    // 31 steps: one sync at step 30 and one after the last.
    let (islands, bytes) = train(&h, PORT + 1, &["--outer", "diloco", "--sync-every", "30"]);
    assert_eq!(islands.len(), 4, "{islands:?}");
    assert!(islands.iter().all(|d| *d == islands[0]), "{islands:?}");
    assert!(
        bytes * 10 < ddp_bytes,
        "DiLoCo moved {bytes} bytes across the link, DDP {ddp_bytes}"
    );
}
