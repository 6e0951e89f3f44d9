//! Interface selection across simulated hosts with two interfaces each: the store is reached
//! on `eth0` (MASTER_ADDR), and `PHALANX_SOCKET_IFNAME=eth1` must put the whole mesh on `eth1`.
//! Proof from three sides: the `PHALANX_DEBUG=INFO` lines name eth1 and its address, the
//! listen addresses are eth1's, and the kernel's byte counters show the allreduce payload on
//! eth1 while eth0 carries only the store's few kilobytes. Without the variable, the same job
//! runs on eth0 (the route to MASTER_ADDR), so the counters do tell the two apart. A spec that
//! matches nothing fails fast with the spec and the interfaces present.

mod netns_util;

use std::time::Duration;

use netns_util::{assert_all_ok, dump, run_all, Finished, Hosts, Net};

const DEADLINE: Duration = Duration::from_secs(90);
/// Payload per allreduce; with 2 ranks a ring sends 2(n-1)/n × SIZE = SIZE per rank per call.
const SIZE: u64 = 4 << 20;
/// Warmup + timed calls.
const CALLS: u64 = 1 + 3;

fn two_iface_hosts(test: &str) -> Option<Hosts> {
    Hosts::up(
        test,
        2,
        &Net {
            two_ifaces: true,
            ..Net::default()
        },
    )
}

/// Runs `phalanx bench allreduce` (self-launched node agents) on both hosts with `ifname` as
/// `PHALANX_SOCKET_IFNAME`; returns the nodes and the tx bytes each host sent on eth0, eth1.
fn bench(h: &Hosts, ifname: Option<&str>) -> (Vec<Finished>, Vec<[u64; 2]>) {
    let before: Vec<[u64; 2]> = (0..2)
        .map(|i| {
            [
                h.counter(i, "eth0", "tx_bytes"),
                h.counter(i, "eth1", "tx_bytes"),
            ]
        })
        .collect();
    let cmds = (0..2)
        .map(|i| {
            let mut c = h.phalanx(i);
            c.args(["bench", "allreduce"])
                .args(h.launch_flags(2, i, 1))
                .args([
                    "--sizes",
                    &SIZE.to_string(),
                    "--iters",
                    "3",
                    "--warmup",
                    "1",
                ])
                .args(["--check", "--json"])
                .env("PHALANX_DEBUG", "INFO");
            if let Some(spec) = ifname {
                c.env("PHALANX_SOCKET_IFNAME", spec);
            }
            c
        })
        .collect();
    let nodes = run_all(cmds, DEADLINE);
    let sent = (0..2)
        .map(|i| {
            [
                h.counter(i, "eth0", "tx_bytes") - before[i][0],
                h.counter(i, "eth1", "tx_bytes") - before[i][1],
            ]
        })
        .collect();
    (nodes, sent)
}

#[test]
fn needs_root_netns_socket_ifname_puts_the_mesh_on_the_second_interface() {
    let Some(h) =
        two_iface_hosts("needs_root_netns_socket_ifname_puts_the_mesh_on_the_second_interface")
    else {
        return;
    };
    let (nodes, sent) = bench(&h, Some("eth1"));
    assert_all_ok(&nodes);
    // Rank 0 (host 0) prints the row; --check verified every element on every rank.
    assert!(
        nodes[0].stdout.contains("\"check\":\"ok\""),
        "{}",
        dump(&nodes)
    );
    for (i, f) in nodes.iter().enumerate() {
        // Node i holds rank i (one rank per host); its log is on that node's stderr.
        let chosen = format!("ifname=eth1 ip={}", h.addr2(i));
        let listen = format!("listen={}:", h.addr2(i));
        let store = format!("store={}:", h.addr(0));
        for want in [&chosen, &listen, &store] {
            assert!(
                f.stderr.contains(want.as_str()),
                "no {want:?}:\n{}",
                dump(&nodes)
            );
        }
        let [eth0, eth1] = sent[i];
        assert!(
            eth1 >= SIZE * CALLS,
            "host {i} sent {eth1} B on eth1, want >= {}; eth0 {eth0} B",
            SIZE * CALLS
        );
        assert!(
            eth0 < SIZE / 4,
            "host {i} sent {eth0} B on eth0: the mesh is not all on eth1 (eth1 {eth1} B)"
        );
    }
}

#[test]
fn needs_root_netns_default_interface_is_the_route_to_master_addr() {
    let Some(h) = two_iface_hosts("needs_root_netns_default_interface_is_the_route_to_master_addr")
    else {
        return;
    };
    let (nodes, sent) = bench(&h, None);
    assert_all_ok(&nodes);
    for (i, f) in nodes.iter().enumerate() {
        let chosen = format!("ifname=eth0 ip={}", h.addr(i));
        assert!(
            f.stderr.contains(&chosen),
            "no {chosen:?}:\n{}",
            dump(&nodes)
        );
        let [eth0, eth1] = sent[i];
        assert!(
            eth0 >= SIZE * CALLS,
            "host {i}: eth0 {eth0} B, eth1 {eth1} B"
        );
        assert!(eth1 < SIZE / 4, "host {i}: eth0 {eth0} B, eth1 {eth1} B");
    }
}

#[test]
fn needs_root_netns_socket_ifname_matching_nothing_names_spec_and_interfaces() {
    let Some(h) = two_iface_hosts(
        "needs_root_netns_socket_ifname_matching_nothing_names_spec_and_interfaces",
    ) else {
        return;
    };
    let started = std::time::Instant::now();
    let (nodes, _) = bench(&h, Some("bogus0"));
    for (i, f) in nodes.iter().enumerate() {
        assert_ne!(f.code(), Some(0), "node {i} succeeded:\n{}", dump(&nodes));
        for want in ["PHALANX_SOCKET_IFNAME=\"bogus0\"", "lo", "eth0", "eth1"] {
            let line = f
                .stderr
                .lines()
                .find(|l| l.contains("matches no interface"))
                .unwrap_or_else(|| panic!("node {i}: no interface error:\n{}", dump(&nodes)));
            assert!(line.contains(want), "node {i}: {want:?} not in {line:?}");
        }
    }
    // A configuration error, reported at once rather than after PHALANX_TIMEOUT (30 s).
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}\n{}",
        started.elapsed(),
        dump(&nodes)
    );
}
