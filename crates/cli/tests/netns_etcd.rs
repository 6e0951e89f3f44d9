//! `--rdzv-backend etcd` across three network-namespace hosts, each running an etcd member and
//! a node agent (`--nnodes 2:3 --fault-tolerance`), as a cluster of three machines would:
//! - **a host lost**: every process of node 0's host (then node 1's, then node 2's) SIGKILLed
//!   at once (its agent, its worker, its etcd member); the other two go on and finish with
//!   equal replicas;
//! - **a partition**: node 2's host cut off the network (its link taken down). Its side of
//!   etcd has no quorum, so it can write nothing into the job: it stops, naming etcd, while the
//!   other two go on without it (no split brain);
//! - **a PyTorch program** (`phalanx_torch.ft`) losing node 0's host: the other two regroup and
//!   finish with equal replicas.

mod launch_util;
mod netns_util;

use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use launch_util::*;
use netns_util::{Hosts, Net, Node};
use phalanx_testing::etcd::EtcdCluster;

/// Three hosts, an etcd member on each, and an agent on each running `phalanx train`.
struct Drill {
    hosts: Hosts,
    cluster: EtcdCluster,
    nodes: Vec<Node>,
    _logs: TempDir,
    begin: Instant,
}

impl Drill {
    /// [`start_with`](Self::start_with) `phalanx train`, returned once rank 0 has printed its
    /// first epoch of 4 (after a fixed second instead, a loaded machine had not yet formed
    /// the workers' process group when node 2 was cut off).
    fn start(test: &str) -> Option<Drill> {
        let train = |c: &mut Command| {
            c.arg("train")
                .args(["--rdzv-backend", "etcd", "--rdzv-endpoint"]);
        };
        let drill = Drill::start_with(test, &train, &|c| {
            c.args([
                "--dataset",
                "mnist5k",
                "--epochs",
                "4",
                "--batch-size",
                "16",
            ])
            .args(["--hidden", "256", "--json"]);
        })?;
        netns_util::wait_for_epoch(&drill.nodes, drill.begin);
        Some(drill)
    }

    /// Three hosts each running `head` (the subcommand up to `--rdzv-endpoint`), the etcd
    /// endpoints, the elastic flags, and `tail`.
    fn start_with(
        test: &str,
        head: &dyn Fn(&mut Command),
        tail: &dyn Fn(&mut Command),
    ) -> Option<Drill> {
        phalanx_testing::etcd::etcd_binary(test)?;
        let hosts = Hosts::up(test, 3, &Net::default())?;
        let at: Vec<(String, String)> = (0..3).map(|i| (hosts.ns(i), hosts.addr(i))).collect();
        let cluster = EtcdCluster::start_in(test, &at, Duration::from_secs(30))?;
        let eps = cluster.endpoints();
        let logs = TempDir::new(test);
        let begin = Instant::now();
        let nodes = (0..3)
            .map(|i| {
                let mut c = hosts.phalanx(i);
                head(&mut c);
                c.arg(&eps)
                    .args(["--rdzv-id", "drill", "--nnodes", "2:3"])
                    .args(["--rdzv-last-call", "3", "--nproc-per-node", "1"])
                    .args(["--fault-tolerance", "--max-restarts", "1"]);
                tail(&mut c);
                Node::start(c, logs.path(), i)
            })
            .collect::<Vec<_>>();
        for n in &nodes {
            netns_util::wait_for(n, "round 0: nodes [0, 1, 2]", begin);
        }
        Some(Drill {
            hosts,
            cluster,
            nodes,
            _logs: logs,
            begin,
        })
    }

    /// The host (index) whose agent took node rank `g`.
    fn host_of(&self, g: u32) -> usize {
        let me = format!("this is node {g}");
        self.nodes
            .iter()
            .position(|n| n.stderr().contains(&me))
            .expect("every node rank is taken")
    }

    /// Waits for every agent; returns the survivors' summaries and stderr, and the exit code
    /// and stderr of `except`'s.
    fn finish(self, except: usize) -> Finish {
        let ended: Vec<_> = self.nodes.into_iter().map(|n| n.wait(self.begin)).collect();
        // A survivor that failed: every host's words, since the cause may be on another.
        let all = || {
            ended
                .iter()
                .enumerate()
                .map(|(i, (code, _, e))| format!("== host {i} (exit {code:?}):\n{e}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let (mut out, mut err) = (String::new(), String::new());
        for (i, (code, o, e)) in ended.iter().enumerate() {
            if i == except {
                continue;
            }
            assert_eq!(*code, Some(0), "host {i} failed\n{}", all());
            out.push_str(o);
            err.push_str(e);
        }
        let (code, _, e) = &ended[except];
        (train_summaries(&out), err, (*code, e.clone()))
    }
}

/// What [`Drill::finish`] gives: the survivors' summaries and stderr, and the lost agent's
/// exit code and stderr.
type Finish = (Vec<(u64, f64, String)>, String, (Option<i32>, String));

/// Every process of node `g`'s host SIGKILLed at once (`ip netns pids`: its agent, its
/// worker, its etcd member): the other two notice by the link, go on without it (no
/// restart), take their next step within seconds and end with equal replicas. With
/// `with_leader`, etcd's leadership is first moved to the host's member, so that its loss
/// also costs etcd an election (every write of the regroup waits for it); without, it is
/// moved away from it when it was there.
fn host_drill(test: &str, g: u32, with_leader: bool) {
    let Some(drill) = Drill::start(test) else {
        return;
    };
    let victim = drill.host_of(g);
    // Member i runs on host i.
    let to = match with_leader {
        true => victim,
        false => (victim + 1) % 3,
    };
    if with_leader || drill.cluster.leader() == Some(victim) {
        drill.cluster.move_leader(to, Duration::from_secs(20));
    }
    // The host goes: every process in its namespace, at once.
    let out = Command::new("ip")
        .args(["netns", "pids", &drill.hosts.ns(victim)])
        .output()
        .unwrap();
    let pids: Vec<i32> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert!(pids.len() >= 3, "agent, worker and etcd member: {pids:?}");
    let killed = SystemTime::now();
    for pid in pids {
        // SAFETY: plain signals to processes this test started in its own namespace.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let (s, err, _) = drill.finish(victim);
    assert_eq!(s.len(), 2, "{s:?}\n{err}");
    assert_eq!(s[0].2, s[1].2, "replicas differ\n{err}");
    assert!(
        err.contains(&format!("node {g} (")) && err.contains("the round goes on without it"),
        "{err}"
    );
    assert!(!err.contains("starting attempt"), "no restart: {err}");
    let (noticed, _) = link_notice_and_next_step(&err);
    let (seen, next) = failure_seen_and_next_step_after(&err, killed);
    let (bound, leader) = next_step_bound(with_leader);
    assert!(
        next < bound,
        "next step {next:.2} s after the kill ({leader}; at most {bound} s)\n{err}"
    );
    eprintln!(
        "node {g}'s host lost ({leader}): its agent's link noticed closed after {noticed:.2} \
         s; {} and its next step came {next:.2} s after the kill; accuracy {:.3}",
        seen.map_or(
            "a survivor met the new generation at a step boundary".into(),
            |s| { format!("a survivor's group failed {s:.2} s") }
        ),
        s[0].1
    );
}

/// Node 0's host, with etcd's leader on it: the worst a lost host can be, since the regroup
/// also waits for etcd's election.
#[test]
fn losing_node_0s_host_with_its_etcd_member_costs_the_others_a_step() {
    host_drill("netns_etcd_host", 0, true);
}

/// No node is special: nodes 1 and 2 (one after the other) cost what node 0 costs, node 1's
/// host with etcd's leader elsewhere, node 2's with it.
#[test]
fn losing_node_1s_or_node_2s_host_costs_the_others_a_step_too() {
    host_drill("netns_etcd_host1", 1, false);
    host_drill("netns_etcd_host2", 2, true);
}

#[test]
fn a_partitioned_node_is_fenced_by_etcds_quorum_and_the_others_go_on() {
    let Some(drill) = Drill::start("netns_etcd_partition") else {
        return;
    };
    let victim = drill.host_of(2);
    // Its link goes down: nothing closes, nothing reaches it, it reaches nothing.
    let cut = Command::new("ip")
        .args(["netns", "exec", &format!("phx-{}-hub", drill.hosts.id)])
        .args(["ip", "link", "set", &format!("p{victim}"), "down"])
        .status()
        .unwrap();
    assert!(cut.success());
    let cut_at = Instant::now();
    let (s, err, (code, lost)) = drill.finish(victim);
    let took = cut_at.elapsed();
    assert_eq!(s.len(), 2, "{s:?}\n{err}");
    assert_eq!(s[0].2, s[1].2, "replicas differ\n{err}");
    assert!(
        err.contains("node 2 (") && err.contains("the round goes on without it"),
        "{err}"
    );
    // The cut-off node: its etcd member is in the minority, so every write it tries is
    // refused, and it stops saying so instead of training on by itself.
    assert_ne!(code, Some(0), "{lost}");
    assert!(
        lost.contains("etcd at ") && !lost.contains("\"event\":\"summary\""),
        "{lost}"
    );
    let line = |text: &str, marker: &str| {
        text.lines()
            .find(|l| l.contains(marker))
            .unwrap_or_default()
            .to_string()
    };
    eprintln!(
        "node 2 partitioned: the others finished {took:?} after the cut\n  they said: {}\n  it said: {}",
        line(&err, "node 2 ("),
        line(&lost, "root cause")
    );
}

/// `phalanx_torch.ft` (python/tests/test_ft.py's Manager loop) under `phalanx launch
/// --rdzv-backend etcd --fault-tolerance --nnodes 2:3` on three hosts: node 0's host lost (its
/// worker kills its agent and itself at step 40, and the test kills what is left in its
/// namespace, the etcd member, as soon as the agent is gone). The workers' groups are phalanx's, whose
/// store is etcd, so nothing of the job lived on node 0 alone: the other two regroup without
/// restarting and finish as a world of 2 with equal replicas.
#[test]
fn a_pytorch_ft_program_loses_node_0s_host_with_its_etcd_member_and_goes_on() {
    let test = "netns_etcd_torch_ft";
    let Some(py) = backend_python(test) else {
        return;
    };
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/tests/test_ft.py");
    let head = |c: &mut Command| {
        c.arg("launch")
            .args(["--rdzv-backend", "etcd", "--rdzv-endpoint"])
            .env("PHALANX_TOKEN", "netns-etcd-torch-ft")
            .env("PHALANX_TIMEOUT", "30s")
            .env("PHALANX_PYTHON", &py);
    };
    let tail = |c: &mut Command| {
        c.arg(&script).args([
            "api",
            "--steps",
            "200",
            "--kill-at",
            "40",
            "--kill-rank",
            "0",
            "--kill-node",
        ]);
    };
    let Some(mut drill) = Drill::start_with(test, &head, &tail) else {
        return;
    };
    let victim = drill.host_of(0);
    // The worker kills its agent and itself at step 40 (its "kill at" line dies with the
    // agent that forwards it); the rest of its host, the etcd member, goes as soon as the
    // agent is seen gone.
    while drill.nodes[victim].child.try_wait().unwrap().is_none() {
        assert!(
            drill.begin.elapsed() < netns_util::DEADLINE,
            "node 0's worker never reached its step:\n{}",
            drill.nodes[victim].stderr()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = Command::new("ip")
        .args(["netns", "pids", &drill.hosts.ns(victim)])
        .output()
        .unwrap();
    for pid in String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        // SAFETY: plain signals to processes this test started in its own namespace.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let ended: Vec<_> = drill
        .nodes
        .into_iter()
        .map(|n| n.wait(drill.begin))
        .collect();
    let dump: String = ended
        .iter()
        .enumerate()
        .map(|(i, (code, o, e))| format!("== host {i} (exit {code:?}):\n{o}\n{e}\n"))
        .collect();
    let mut results = Vec::new();
    for (i, (code, o, e)) in ended.iter().enumerate() {
        if i == victim {
            continue;
        }
        assert_eq!(*code, Some(0), "{dump}");
        assert!(!e.contains("restart 1 of"), "restarted:\n{dump}");
        results.extend(o.lines().filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = w.iter().position(|&x| x == "digest")?;
            Some((w.get(at + 1)?.to_string(), w.get(at + 3)?.to_string()))
        }));
    }
    assert!(dump.contains("the round goes on without it"), "{dump}");
    assert_eq!(results.len(), 2, "{dump}");
    assert_eq!(results[0], results[1], "replicas differ:\n{dump}");
    assert_eq!(results[0].1, "2", "the survivors' world:\n{dump}");
}
