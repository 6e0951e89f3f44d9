//! `phalanx doctor` across simulated hosts (network namespaces, real TCP): one host's link
//! shaped slower must be named as the slowest link, with its rank and address; a host that
//! cannot reach another must fail the doctor on every node, naming both ranks and the address.
//! Skipped with a printed reason without root and `ip netns`.

mod netns_util;

use std::process::Command;
use std::time::Duration;

use netns_util::{dump, run_all, Finished, Hosts, Net};

const DEADLINE: Duration = Duration::from_secs(90);

/// Runs `ip netns exec <ns> ARGS…`, failing the test when it fails.
fn in_ns(ns: &str, args: &[&str]) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .expect("running ip netns exec");
    assert!(
        out.status.success(),
        "ip netns exec {ns} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `phalanx doctor --json` on every host, one rank each; every node's report parsed.
fn doctor_json(h: &Hosts, extra: &[&str]) -> (Vec<Finished>, Vec<serde_json::Value>) {
    let cmds = (0..h.n)
        .map(|i| {
            let mut c = h.phalanx(i);
            c.arg("doctor")
                .args(h.launch_flags(h.n, i, 1))
                .arg("--json")
                .args(extra);
            c
        })
        .collect();
    let nodes = run_all(cmds, DEADLINE);
    let reports = nodes
        .iter()
        .map(|f| {
            serde_json::from_str(&f.stdout).unwrap_or_else(|e| {
                panic!(
                    "a node's stdout is not one JSON report ({e}):\n{}",
                    dump(&nodes)
                )
            })
        })
        .collect();
    (nodes, reports)
}

#[test]
fn needs_root_netns_doctor_names_the_shaped_host_as_the_slowest_link() {
    let test = "needs_root_netns_doctor_names_the_shaped_host_as_the_slowest_link";
    let Some(h) = Hosts::up(test, 3, &Net::default()) else {
        return;
    };
    // Host 2's NIC becomes a 100 Mbit/s one, both directions (its egress and the switch's
    // egress toward it); hosts 0 and 1 keep the unshaped veth (several Gbit/s).
    let hub = format!("phx-{}-hub", h.id);
    let tbf = [
        "root", "tbf", "rate", "100mbit", "burst", "256kb", "latency", "20ms",
    ];
    in_ns(
        &h.ns(2),
        &[&["tc", "qdisc", "replace", "dev", "eth0"][..], &tbf].concat(),
    );
    in_ns(
        &hub,
        &[&["tc", "qdisc", "replace", "dev", "p2"][..], &tbf].concat(),
    );

    let (nodes, reports) = doctor_json(&h, &[]);
    assert!(
        nodes.iter().all(|f| f.code() == Some(0)),
        "a node failed:\n{}",
        dump(&nodes)
    );
    // Every node prints the same report (node 0's workers build it, the others fetch it).
    let r = &reports[0];
    for other in &reports[1..] {
        assert_eq!(other, r, "nodes disagree");
    }
    assert_eq!(
        (r["world_size"].as_u64(), r["nnodes"].as_u64()),
        (Some(3), Some(3))
    );
    for (i, rank) in r["ranks"].as_array().unwrap().iter().enumerate() {
        assert_eq!(rank["ifname"], "eth0", "{rank:#}");
        assert_eq!(rank["ip"], h.addr(i), "{rank:#}");
        assert_eq!(rank["node_rank"], i, "{rank:#}");
        assert_eq!(rank["uses_shared_memory"], false, "{rank:#}");
    }
    let link = |a: usize, b: usize| {
        r["links"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["a"] == a && l["b"] == b)
            .unwrap_or_else(|| panic!("no link {a}-{b}: {r:#}"))
            .clone()
    };
    let gbps = |l: &serde_json::Value| {
        let (x, y) = (l["a_to_b_gbps"].as_f64(), l["b_to_a_gbps"].as_f64());
        x.unwrap().min(y.unwrap())
    };
    // The shaped links run at the tbf rate (within its burst), the other one well above it.
    for (a, b) in [(0, 2), (1, 2)] {
        let g = gbps(&link(a, b));
        assert!((0.05..0.15).contains(&g), "{a}-{b}: {g} Gbit/s: {r:#}");
    }
    assert!(gbps(&link(0, 1)) > 0.5, "{r:#}");
    let slowest = r["slowest_link"].as_array().unwrap();
    assert_eq!(slowest[1], 2, "{r:#}");
    let verdict = r["verdict"].as_str().unwrap();
    assert!(verdict.starts_with("slowest link: rank "), "{verdict}");
    assert!(
        verdict.contains("rank 2 (node 2, host ")
            && verdict.contains(&format!("eth0 {})", h.addr(2))),
        "{verdict}"
    );
    assert!(
        verdict.contains("Gbit/s") && verdict.contains("RTT"),
        "{verdict}"
    );
    assert_eq!(r["ok"], true, "{r:#}");
}

#[test]
fn needs_root_netns_doctor_fails_on_every_node_naming_the_unreachable_pair() {
    let test = "needs_root_netns_doctor_fails_on_every_node_naming_the_unreachable_pair";
    let Some(h) = Hosts::up(test, 3, &Net::default()) else {
        return;
    };
    // Host 1 has no route to host 2 (and so cannot answer it either); both reach host 0,
    // where the store is.
    in_ns(
        &h.ns(1),
        &[
            "ip",
            "route",
            "add",
            "unreachable",
            &format!("{}/32", h.addr(2)),
        ],
    );

    let started = std::time::Instant::now();
    let (nodes, reports) = doctor_json(&h, &["--connect-timeout", "1s"]);
    assert!(
        nodes.iter().all(|f| f.code() == Some(1)),
        "every node must fail:\n{}",
        dump(&nodes)
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let r = &reports[0];
    assert_eq!(r["ok"], false);
    let reach = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "reachability")
        .unwrap();
    assert_eq!(reach["status"], "fail", "{reach:#}");
    let detail = reach["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("rank 1 → rank 2 ({}:", h.addr(2))),
        "{detail}"
    );
    assert!(
        !detail.contains("rank 0"),
        "only the 1-2 pair is cut: {detail}"
    );
    let verdict = r["verdict"].as_str().unwrap();
    assert!(verdict.starts_with("FAILED (reachability"), "{verdict}");
    // The pairs that work were still measured; the process group was not started.
    for (a, b, ok) in [(0, 1, true), (0, 2, true), (1, 2, false)] {
        let l = r["links"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["a"] == a && l["b"] == b)
            .unwrap();
        assert_eq!(l["reachable"], ok, "{l:#}");
        assert_eq!(l["a_to_b_gbps"].is_f64(), ok, "{l:#}");
    }
    let pg = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "process group")
        .unwrap();
    assert_eq!(pg["status"], "skip", "{pg:#}");
}

#[test]
fn needs_root_netns_doctor_reports_the_interface_phalanx_socket_ifname_picks() {
    let test = "needs_root_netns_doctor_reports_the_interface_phalanx_socket_ifname_picks";
    let net = Net {
        two_ifaces: true,
        ..Net::default()
    };
    let Some(h) = Hosts::up(test, 2, &net) else {
        return;
    };
    // The store stays on eth0 (--master-addr); the ranks must listen, and be reached, on eth1.
    let cmds = (0..2)
        .map(|i| {
            let mut c = h.phalanx(i);
            c.env("PHALANX_SOCKET_IFNAME", "eth1")
                .arg("doctor")
                .args(h.launch_flags(2, i, 1))
                .arg("--json");
            c
        })
        .collect();
    let nodes = run_all(cmds, DEADLINE);
    assert!(
        nodes.iter().all(|f| f.code() == Some(0)),
        "a node failed:\n{}",
        dump(&nodes)
    );
    let r: serde_json::Value = serde_json::from_str(&nodes[1].stdout).expect("node 1's report");
    for (i, rank) in r["ranks"].as_array().unwrap().iter().enumerate() {
        assert_eq!(rank["ifname"], "eth1", "{rank:#}");
        assert_eq!(rank["ip"], h.addr2(i), "{rank:#}");
    }
    let verdict = r["verdict"].as_str().unwrap();
    assert!(
        verdict.contains(&format!("eth1 {})", h.addr2(0)))
            && verdict.contains(&format!("eth1 {})", h.addr2(1))),
        "{verdict}"
    );
}
