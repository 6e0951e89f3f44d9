//! Interface selection across simulated hosts with two interfaces each: the store is reached
//! on `eth0` (MASTER_ADDR), and `PHALANX_SOCKET_IFNAME=eth1` must put the whole mesh on `eth1`.
//! Proof from three sides: the `PHALANX_DEBUG=INFO` lines name eth1 and its address, the
//! listen addresses are eth1's, and the kernel's byte counters show the allreduce payload on
//! eth1 while eth0 carries only the store's few kilobytes. Without the variable, the same job
//! runs on eth0 (the route to MASTER_ADDR), so the counters do tell the two apart. A spec that
//! matches nothing fails fast with the spec and the interfaces present.
//!
//! A PyTorch user's cluster profile (`export NCCL_DEBUG=INFO`, `export NCCL_SOCKET_IFNAME=…`,
//! or Gloo's `GLOO_SOCKET_IFNAME`) decides too when no `PHALANX_*` variable is set (Note
//! [Borrowed variables] in phalanx-core): `phalanx train` with only those two lines logs at
//! INFO and trains on eth1, `phalanx doctor` says that `GLOO_SOCKET_IFNAME` chose eth1 over
//! `NCCL_SOCKET_IFNAME`'s decoy, and a bad `NCCL_SOCKET_IFNAME` is named as such.

mod netns_util;

use std::time::Duration;

use netns_util::{assert_all_ok, dump, run_all, Finished, Hosts, Net};

const DEADLINE: Duration = Duration::from_secs(90);
/// Payload per allreduce; with 2 ranks a ring sends 2(n-1)/n × SIZE = SIZE per rank per call.
const SIZE: u64 = 4 << 20;
/// Warmup + timed calls.
const CALLS: u64 = 1 + 3;
/// Optimizer steps of the `phalanx train` job, and its deadline (2 hosts on 2 loaded vCPUs).
const TRAIN_STEPS: u64 = 20;
const TRAIN_DEADLINE: Duration = Duration::from_secs(180);

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

/// The tx bytes each of the two hosts has sent so far on eth0 and eth1.
fn tx_bytes(h: &Hosts) -> Vec<[u64; 2]> {
    (0..2)
        .map(|i| {
            [
                h.counter(i, "eth0", "tx_bytes"),
                h.counter(i, "eth1", "tx_bytes"),
            ]
        })
        .collect()
}

/// What each host sent on eth0 and eth1 since `before`.
fn tx_since(h: &Hosts, before: &[[u64; 2]]) -> Vec<[u64; 2]> {
    tx_bytes(h)
        .iter()
        .zip(before)
        .map(|(now, then)| [now[0] - then[0], now[1] - then[1]])
        .collect()
}

/// Runs `phalanx bench allreduce` (self-launched node agents) on both hosts with `ifname` as
/// `PHALANX_SOCKET_IFNAME`; returns the nodes and the tx bytes each host sent on eth0, eth1.
fn bench(h: &Hosts, ifname: Option<&str>) -> (Vec<Finished>, Vec<[u64; 2]>) {
    bench_with(h, ifname.map(|spec| ("PHALANX_SOCKET_IFNAME", spec)))
}

/// [`bench`] with `var=value` as the interface variable (any of the three).
fn bench_with(h: &Hosts, ifname: Option<(&str, &str)>) -> (Vec<Finished>, Vec<[u64; 2]>) {
    let before = tx_bytes(h);
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
            if let Some((var, spec)) = ifname {
                c.env(var, spec);
            }
            c
        })
        .collect();
    let nodes = run_all(cmds, DEADLINE);
    let sent = tx_since(h, &before);
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

#[test]
fn needs_root_netns_nccl_profile_puts_train_on_the_interface_it_names() {
    let test = "needs_root_netns_nccl_profile_puts_train_on_the_interface_it_names";
    let Some(h) = two_iface_hosts(test) else {
        return;
    };
    // A torchrun user's profile, and nothing of phalanx's: the route to MASTER_ADDR (eth0,
    // where the store is) is the decoy; NCCL_SOCKET_IFNAME must move the mesh to eth1, and
    // NCCL_DEBUG=INFO must turn on the INFO lines that say so.
    let before = tx_bytes(&h);
    let cmds = (0..2)
        .map(|i| {
            let mut c = h.phalanx(i);
            c.env("NCCL_DEBUG", "INFO")
                .env("NCCL_SOCKET_IFNAME", "eth1")
                .arg("train")
                .args(h.launch_flags(2, i, 1))
                .args(["--dataset", "digits", "--epochs", "1", "--hidden", "32"])
                .args([
                    "--max-steps",
                    &TRAIN_STEPS.to_string(),
                    "--seed",
                    "7",
                    "--json",
                ]);
            c
        })
        .collect();
    let nodes = run_all(cmds, TRAIN_DEADLINE);
    let sent = tx_since(&h, &before);
    assert_all_ok(&nodes);
    let mut digests = Vec::new();
    for (i, f) in nodes.iter().enumerate() {
        // Node i holds rank i; the INFO lines are on its stderr only because NCCL_DEBUG=INFO.
        let chosen = format!("ifname=eth1 ip={}", h.addr2(i));
        let from = "ifname_from=\"NCCL_SOCKET_IFNAME=eth1\"";
        let listen = format!("listen={}:", h.addr2(i));
        let store = format!("store={}:", h.addr(0));
        for want in [chosen.as_str(), from, &listen, &store] {
            assert!(
                f.stderr.contains(want),
                "node {i}: no {want:?}:\n{}",
                dump(&nodes)
            );
        }
        assert!(
            !f.stderr.contains("PHALANX_SOCKET_IFNAME"),
            "node {i}: {}",
            dump(&nodes)
        );
        digests.extend(f.stdout.lines().filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            (v["event"] == "summary").then(|| v["param_digest"].to_string())
        }));
        // The gradients went over eth1: every step allreduces the MLP's 2410 f32 (direct
        // exchange sends them whole), while eth0 carried only store traffic.
        let [eth0, eth1] = sent[i];
        assert!(
            eth1 >= TRAIN_STEPS * 2410 * 4,
            "host {i}: eth1 {eth1} B, eth0 {eth0} B\n{}",
            dump(&nodes)
        );
    }
    assert!(
        digests.len() == 2 && digests[0] == digests[1],
        "ranks disagree or did not finish: {digests:?}\n{}",
        dump(&nodes)
    );
}

#[test]
fn needs_root_netns_doctor_says_gloo_socket_ifname_chose_over_nccl_socket_ifname() {
    let test = "needs_root_netns_doctor_says_gloo_socket_ifname_chose_over_nccl_socket_ifname";
    let Some(h) = two_iface_hosts(test) else {
        return;
    };
    // Both PyTorch variables set: Gloo's (exact names) comes first and names eth1; NCCL's
    // names eth0, the interface the route would pick anyway, so only precedence moves it.
    let cmds = (0..2)
        .map(|i| {
            let mut c = h.phalanx(i);
            c.env("GLOO_SOCKET_IFNAME", "eth1")
                .env("NCCL_SOCKET_IFNAME", "eth0")
                .arg("doctor")
                .args(h.launch_flags(2, i, 1))
                .args(["--bandwidth-time", "20ms", "--json"]);
            c
        })
        .collect();
    let nodes = run_all(cmds, DEADLINE);
    assert!(
        nodes.iter().all(|f| f.code() == Some(0)),
        "a node failed:\n{}",
        dump(&nodes)
    );
    for (node, f) in nodes.iter().enumerate() {
        let r: serde_json::Value = serde_json::from_str(&f.stdout)
            .unwrap_or_else(|e| panic!("node {node}'s report: {e}\n{}", dump(&nodes)));
        for (i, rank) in r["ranks"].as_array().unwrap().iter().enumerate() {
            assert_eq!(rank["ifname"], "eth1", "{rank:#}");
            assert_eq!(rank["ip"], h.addr2(i), "{rank:#}");
            assert_eq!(rank["ifname_from"]["var"], "GLOO_SOCKET_IFNAME", "{rank:#}");
            assert_eq!(rank["ifname_from"]["value"], "eth1", "{rank:#}");
        }
        let check = r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "interfaces")
            .unwrap();
        assert_eq!(
            check["detail"],
            "every rank has an address (interfaces: eth1 from GLOO_SOCKET_IFNAME=eth1)",
            "{check:#}"
        );
    }
}

#[test]
fn needs_root_netns_nccl_socket_ifname_matching_nothing_names_that_variable() {
    let test = "needs_root_netns_nccl_socket_ifname_matching_nothing_names_that_variable";
    let Some(h) = two_iface_hosts(test) else {
        return;
    };
    let started = std::time::Instant::now();
    let (nodes, _) = bench_with(&h, Some(("NCCL_SOCKET_IFNAME", "bogus0")));
    for (i, f) in nodes.iter().enumerate() {
        assert_ne!(f.code(), Some(0), "node {i} succeeded:\n{}", dump(&nodes));
        let line = f
            .stderr
            .lines()
            .find(|l| l.contains("matches no interface"))
            .unwrap_or_else(|| panic!("node {i}: no interface error:\n{}", dump(&nodes)));
        for want in [
            "NCCL_SOCKET_IFNAME=\"bogus0\"",
            "NCCL's syntax",
            "lo",
            "eth0",
            "eth1",
        ] {
            assert!(line.contains(want), "node {i}: {want:?} not in {line:?}");
        }
        // The variable the user set is named, not phalanx's own.
        assert!(
            !line.contains("PHALANX_SOCKET_IFNAME"),
            "node {i}: {line:?}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}\n{}",
        started.elapsed(),
        dump(&nodes)
    );
}
