//! Agent heartbeats across hosts (Note [Agent heartbeats]): three network-namespace hosts run a
//! job whose workers only sleep, so no collective would ever fail. Host 2's link goes down; both
//! other nodes name node 2 and its silence within the documented bound (5 s), and end.
//!
//! Skipped with a printed reason without root and `ip netns`.

mod launch_util;
mod netns_util;

use std::process::Command;
use std::time::{Duration, Instant};

use netns_util::{Hosts, Net};

#[test]
fn needs_root_netns_a_host_whose_link_goes_down_is_named_by_every_other_node() {
    let test = "needs_root_netns_a_host_whose_link_goes_down_is_named_by_every_other_node";
    let Some(h) = Hosts::up(test, 3, &Net::default()) else {
        return;
    };
    let dir = launch_util::TempDir::new("netns-heartbeat");
    let script = format!("echo $$ > {}/up.$RANK; exec sleep 120", dir.str());
    let cmds: Vec<Command> = (0..3)
        .map(|i| {
            let mut c = h.phalanx(i);
            c.arg("launch")
                .args(h.launch_flags(3, i, 1))
                .args(["--", "sh", "-c", &script]);
            c
        })
        .collect();
    let nodes = std::thread::spawn(move || netns_util::run_all(cmds, Duration::from_secs(90)));
    // Once every node's worker runs (the store has all three heartbeats), cut host 2 off.
    launch_util::wait_for_files(dir.path(), "up.", 3, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(1));
    let down = Command::new("ip")
        .args([
            "netns",
            "exec",
            &h.ns(2),
            "ip",
            "link",
            "set",
            "eth0",
            "down",
        ])
        .status()
        .expect("ip link set down");
    assert!(down.success());
    let cut = Instant::now();
    let nodes = nodes.join().expect("the nodes' runner");
    let ended = cut.elapsed();
    for (i, f) in nodes.iter().enumerate().take(2) {
        assert_ne!(f.code(), Some(0), "node {i} went on:\n{}", f.stderr);
        assert!(
            f.stderr.contains("root cause: node 2 (host ")
                && f.stderr.contains("its agent stopped its heartbeat"),
            "node {i} did not name node 2:\n{}",
            f.stderr
        );
    }
    // Host 2 lost the store with its link: it fails too, saying so.
    assert_ne!(nodes[2].code(), Some(0), "{}", nodes[2].stderr);
    // The 5 s bound, a read interval, and the stop of the nodes' own workers.
    assert!(
        ended < Duration::from_secs(20),
        "ended {ended:?} after the cut"
    );
    eprintln!("{test}: nodes 0 and 1 ended {ended:?} after host 2's link went down");
}
