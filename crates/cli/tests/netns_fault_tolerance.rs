//! `--fault-tolerance` across hosts (Note [FT generations], Note [A regroup]): `phalanx train` on
//! three network-namespace hosts, one rank each; host 1's worker is SIGKILLed mid-run. The
//! workers on hosts 0 and 2 see the TCP connections close and go on together; host 1's agent
//! starts a replacement, which joins them over the network, and the job ends on all three hosts
//! with identical replicas, without a restart.
//!
//! A second test loses a whole host (agent and worker SIGKILLed) of an elastic `--nnodes 2:3`
//! job: the others name it by its silent heartbeat and train on in process, without a restart.
//! A third starts that job on two hosts, adds the third mid-run (admitted into the running
//! round: Note [Node admission]), then loses host 1: one round from start to end, no restart. A
//! fourth loses a host that holds a whole model replica of `--tp 2` (Note [Replicas that leave
//! and join] in phalanx-train): the other host's replica trains on alone.
//!
//! Skipped with a printed reason without root and `ip netns`.

mod launch_util;
mod netns_util;

use std::time::{Duration, Instant};

use netns_util::{wait_for, wait_for_progress, Hosts, Net, Node, PORT};

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

#[test]
fn needs_root_netns_a_lost_host_leaves_the_group_and_the_others_train_on_in_process() {
    let test = "needs_root_netns_a_lost_host_leaves_the_group_and_the_others_train_on_in_process";
    let Some(h) = Hosts::up(test, 3, &Net::default()) else {
        return;
    };
    let logs = launch_util::TempDir::new("netns-ft-node-logs");
    let ckpt = launch_util::TempDir::new("netns-ft-node-ckpt");
    let node = |i: usize| {
        let mut c = h.phalanx(i);
        c.arg("train")
            .args(["--nnodes", "2:3", "--node-rank", &i.to_string()])
            .args(["--nproc-per-node", "1", "--master-addr", &h.addr(0)])
            .args(["--master-port", &PORT.to_string(), "--rdzv-last-call", "5"])
            .args(["--fault-tolerance", "--max-restarts", "1"])
            .args([
                "--dataset",
                "mnist5k",
                "--epochs",
                "8",
                "--batch-size",
                "16",
            ])
            .args(["--hidden", "512", "--depth", "2", "--json"])
            .args(["--checkpoint-every", "20", "--checkpoint-dir", ckpt.str()]);
        Node::start(c, logs.path(), i)
    };
    let begin = Instant::now();
    let (n0, n1, n2) = (node(0), node(1), node(2));
    wait_for(&n0, "nodes [0, 1, 2] (3 workers", begin);
    let before = wait_for_progress(|| launch_util::newest_step(ckpt.path()), 0, begin);
    // Host 2's agent and worker are SIGKILLed: nobody is left there to say so.
    let agent2 = n2.child.id() as i32;
    let workers2 = launch_util::workers(agent2);
    assert_eq!(workers2.len(), 1, "host 2's worker: {workers2:?}");
    // SAFETY: plain signals to processes this test started (the worker may already be gone
    // with its agent, its parent-death signal).
    for pid in std::iter::once(agent2).chain(workers2.iter().map(|w| w.0)) {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let killed = Instant::now();
    wait_for(&n0, "the round goes on without it", begin);
    let noticed = killed.elapsed();
    let (c0, out0, err0) = n0.wait(begin);
    let (c1, out1, err1) = n1.wait(begin);
    drop(n2);
    let all = format!("host 0:\n{err0}\nhost 1:\n{err1}");
    assert_eq!(c0, Some(0), "{all}");
    assert_eq!(c1, Some(0), "{all}");
    // Named by its silent heartbeat, left behind in process: no second round, no restart.
    assert!(
        err0.contains("node 2 (") && err0.contains("stopped its heartbeat"),
        "{all}"
    );
    assert!(
        !err0.contains("round 1") && !err0.contains("starting attempt"),
        "{all}"
    );
    for (r, err) in [(0, &err0), (1, &err1)] {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("rank {r}: generation "))
                    && l.contains("re-formed with ranks [0, 1] of 3")),
            "rank {r} did not go on with rank {}: {all}",
            1 - r
        );
    }
    let mut s = launch_util::train_summaries(&out0);
    s.extend(launch_util::train_summaries(&out1));
    s.sort_by_key(|x| x.0);
    assert_eq!(s.len(), 2, "{out0}\n{out1}");
    assert_eq!(s[0].2, s[1].2, "replicas differ:\n{out0}\n{out1}");
    assert!(launch_util::newest_step(ckpt.path()) > before);
    eprintln!(
        "{test}: host 2 left behind {noticed:?} after the kill; accuracy {:.3}",
        s[0].1
    );
}

#[test]
fn needs_root_netns_a_host_that_arrives_is_admitted_and_one_that_leaves_is_left_without_a_restart()
{
    let test = "needs_root_netns_a_host_that_arrives_is_admitted_and_one_that_leaves_is_left_\
                without_a_restart";
    let Some(h) = Hosts::up(test, 3, &Net::default()) else {
        return;
    };
    let logs = launch_util::TempDir::new("netns-ft-admit-logs");
    let ckpt = launch_util::TempDir::new("netns-ft-admit-ckpt");
    let node = |i: usize| {
        let mut c = h.phalanx(i);
        c.arg("train")
            .args(["--nnodes", "2:3", "--node-rank", &i.to_string()])
            .args(["--nproc-per-node", "1", "--master-addr", &h.addr(0)])
            .args(["--master-port", &PORT.to_string(), "--rdzv-last-call", "1"])
            .args(["--fault-tolerance", "--max-restarts", "1"])
            .args([
                "--dataset",
                "mnist5k",
                "--epochs",
                "12",
                "--batch-size",
                "16",
            ])
            .args([
                "--hidden",
                "512",
                "--depth",
                "2",
                "--momentum",
                "0.9",
                "--json",
            ])
            .args(["--checkpoint-every", "20", "--checkpoint-dir", ckpt.str()]);
        Node::start(c, logs.path(), i)
    };
    let begin = Instant::now();
    let (n0, n1) = (node(0), node(1));
    wait_for(&n0, "nodes [0, 1] (2 workers", begin);
    wait_for_progress(|| launch_util::newest_step(ckpt.path()), 0, begin);
    // Host 2 arrives while round 0 runs: admitted into it, its rank joins at a step boundary.
    let arrived = Instant::now();
    let n2 = node(2);
    wait_for(&n2, "re-formed with ranks [0, 1, 2] of 3", begin);
    let joined = arrived.elapsed();
    // Host 1's agent and worker are SIGKILLed: hosts 0 and 2 go on without it.
    let agent1 = n1.child.id() as i32;
    let workers1 = launch_util::workers(agent1);
    assert_eq!(workers1.len(), 1, "host 1's worker: {workers1:?}");
    let before = launch_util::newest_step(ckpt.path());
    // SAFETY: plain signals to processes this test started.
    for pid in std::iter::once(agent1).chain(workers1.iter().map(|w| w.0)) {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let (c0, out0, err0) = n0.wait(begin);
    let (c2, out2, err2) = n2.wait(begin);
    drop(n1);
    let all = format!("host 0:\n{err0}\nhost 2:\n{err2}");
    assert_eq!(c0, Some(0), "{all}");
    assert_eq!(c2, Some(0), "{all}");
    assert!(
        err2.contains("admitted into the running round") && err0.contains("node 2 ("),
        "{all}"
    );
    assert!(err0.contains("joins round 0 without a restart"), "{all}");
    // One round from start to end: nobody restarted, for the arrival or the loss.
    for err in [&err0, &err2] {
        assert!(
            !err.contains("round 1") && !err.contains("starting attempt"),
            "{all}"
        );
    }
    assert!(
        err0.contains("node 1 (") && err0.contains("stopped its heartbeat"),
        "{all}"
    );
    for (r, err) in [(0, &err0), (2, &err2)] {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("rank {r}: generation "))
                    && l.contains("re-formed with ranks [0, 2] of 3")),
            "rank {r} did not go on without rank 1: {all}"
        );
    }
    let mut s = launch_util::train_summaries(&out0);
    s.extend(launch_util::train_summaries(&out2));
    s.sort_by_key(|x| x.0);
    assert_eq!(s.len(), 2, "{out0}\n{out2}");
    assert_eq!(s[0].2, s[1].2, "replicas differ:\n{out0}\n{out2}");
    assert!(launch_util::newest_step(ckpt.path()) > before);
    eprintln!(
        "{test}: host 2 joined {joined:?} after it started; accuracy {:.3}",
        s[0].1
    );
}

#[test]
fn needs_root_netns_a_lost_host_takes_its_tensor_parallel_replica_and_the_other_goes_on() {
    let test =
        "needs_root_netns_a_lost_host_takes_its_tensor_parallel_replica_and_the_other_goes_on";
    let Some(h) = Hosts::up(test, 2, &Net::default()) else {
        return;
    };
    let logs = launch_util::TempDir::new("netns-ft-tp-logs");
    let ckpt = launch_util::TempDir::new("netns-ft-tp-ckpt");
    // Each host one replica of --tp 2 (tensor parallelism inside a host, as the mesh keeps it).
    let node = |i: usize| {
        let mut c = h.phalanx(i);
        c.arg("train")
            .args(["--nnodes", "1:2", "--node-rank", &i.to_string()])
            .args(["--nproc-per-node", "2", "--master-addr", &h.addr(0)])
            .args(["--master-port", &PORT.to_string(), "--rdzv-last-call", "5"])
            .args(["--fault-tolerance", "--max-restarts", "1"])
            .args([
                "--model", "gpt", "--tp", "2", "--hidden", "32", "--depth", "2",
            ])
            .args(["--heads", "2", "--seq-len", "16", "--batch-size", "8"])
            .args(["--max-steps", "1500", "--json"])
            .args(["--checkpoint-every", "50", "--checkpoint-dir", ckpt.str()]);
        Node::start(c, logs.path(), i)
    };
    let begin = Instant::now();
    let (n0, n1) = (node(0), node(1));
    wait_for(&n0, "nodes [0, 1] (4 workers", begin);
    let before = wait_for_progress(|| launch_util::newest_step(ckpt.path()), 100, begin);
    // Host 1's agent and both its workers are SIGKILLed.
    let agent1 = n1.child.id() as i32;
    let workers1 = launch_util::workers(agent1);
    assert_eq!(workers1.len(), 2, "host 1's workers: {workers1:?}");
    // SAFETY: plain signals to processes this test started.
    for pid in std::iter::once(agent1).chain(workers1.iter().map(|w| w.0)) {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let (c0, out0, err0) = n0.wait(begin);
    drop(n1);
    assert_eq!(c0, Some(0), "host 0:\n{err0}");
    assert!(
        !err0.contains("round 1") && !err0.contains("starting attempt"),
        "{err0}"
    );
    for r in 0..2 {
        assert!(
            err0.lines()
                .any(|l| l.contains(&format!("rank {r}: generation "))
                    && l.contains("re-formed with ranks [0, 1] of 4")),
            "rank {r} did not go on in its replica alone: {err0}"
        );
    }
    let s = launch_util::train_summaries(&out0);
    assert_eq!(s.len(), 2, "{out0}");
    assert_eq!(s[0].2, s[1].2, "the pieces end on two models:\n{out0}");
    assert!(launch_util::newest_step(ckpt.path()) > before);
}
