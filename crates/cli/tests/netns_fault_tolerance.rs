//! `--fault-tolerance` across hosts (Note [Generations], Note [Regroup]): `phalanx train` on
//! three network-namespace hosts, one rank each; host 1's worker is SIGKILLed mid-run. The
//! workers on hosts 0 and 2 see the TCP connections close and go on together; host 1's agent
//! starts a replacement, which joins them over the network, and the job ends on all three hosts
//! with identical replicas, without a restart.
//!
//! Skipped with a printed reason without root and `ip netns`.

mod launch_util;
mod netns_util;

use std::time::{Duration, Instant};

use netns_util::{Hosts, Net, PORT};

/// The pid of the worker with `RANK=rank` whose command line holds `marker` (this test's
/// checkpoint folder: the agents' command lines hold it too, but they have no `RANK`).
fn worker_with(marker: &str, rank: u32) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        if !String::from_utf8_lossy(&cmdline).contains(marker) {
            return None;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        env.split(|&b| b == 0)
            .any(|kv| kv == format!("RANK={rank}").as_bytes())
            .then_some(pid)
    })
}

#[test]
fn needs_root_netns_a_killed_worker_is_replaced_and_the_hosts_go_on_without_a_restart() {
    let test = "needs_root_netns_a_killed_worker_is_replaced_and_the_hosts_go_on_without_a_restart";
    let Some(h) = Hosts::up(test, 3, &Net::default()) else {
        return;
    };
    let ckpt = launch_util::TempDir::new("netns-ft-ckpt");
    let cmds = (0..3)
        .map(|i| {
            let mut c = h.phalanx(i);
            c.arg("train")
                .args(["--nnodes", "3", "--node-rank", &i.to_string()])
                .args(["--nproc-per-node", "1", "--master-addr", &h.addr(0)])
                .args(["--master-port", &PORT.to_string()])
                .args(["--fault-tolerance", "--max-restarts", "1"])
                .args([
                    "--dataset",
                    "mnist5k",
                    "--epochs",
                    "6",
                    "--batch-size",
                    "16",
                ])
                .args(["--hidden", "256", "--momentum", "0.9", "--json"])
                .args(["--checkpoint-every", "20", "--checkpoint-dir", ckpt.str()]);
            c
        })
        .collect();
    let marker = ckpt.str().to_string();
    let dir = ckpt.path().to_path_buf();
    let killer = std::thread::spawn(move || {
        let begin = Instant::now();
        while launch_util::newest_step(&dir) < 100 {
            assert!(begin.elapsed() < Duration::from_secs(120), "no progress");
            std::thread::sleep(Duration::from_millis(5));
        }
        let pid = worker_with(&marker, 1).expect("host 1's worker");
        // SAFETY: a plain signal to a process this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        (pid, launch_util::newest_step(&dir))
    });
    let nodes = netns_util::run_all(cmds, Duration::from_secs(240));
    let (victim, killed_after) = killer.join().unwrap();
    netns_util::assert_all_ok(&nodes);
    let all = netns_util::dump(&nodes);
    assert!(
        nodes[1].stderr.contains(&format!(
            "rank 1 (local rank 0, pid {victim}) ended with signal 9 (SIGKILL)"
        )) && nodes[1].stderr.contains("the other ranks go on without it"),
        "{all}"
    );
    for (i, n) in nodes.iter().enumerate() {
        // Every host ends in one group of three again (the replacement included).
        assert!(
            n.stderr
                .lines()
                .any(|l| l.contains(&format!("rank {i}: generation "))
                    && l.contains("re-formed with ranks [0, 1, 2] of 3")),
            "host {i} did not regroup:\n{all}"
        );
        // Nobody restarted: one round, no "restart 1 of".
        assert!(!n.stderr.contains("starting attempt"), "{all}");
    }
    let mut s: Vec<_> = nodes
        .iter()
        .flat_map(|n| launch_util::train_summaries(&n.stdout))
        .collect();
    s.sort_by_key(|x| x.0);
    assert_eq!(s.len(), 3, "{all}");
    assert!(
        s.iter().all(|x| x.2 == s[0].2),
        "replicas differ: {s:?}\n{all}"
    );
    assert!(launch_util::newest_step(ckpt.path()) > killed_after);
    let regroups: Vec<&str> = nodes[0]
        .stderr
        .lines()
        .filter(|l| l.contains("re-formed"))
        .collect();
    eprintln!(
        "{test}: killed after step {killed_after}; accuracy {:.3}; host 0: {regroups:#?}",
        s[0].1
    );
}
