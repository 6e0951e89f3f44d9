//! `--rdzv-backend etcd` against a real 3-member etcd cluster (Debian's etcd-server, started by
//! the test on loopback, `phalanx_testing::etcd`): the job's store lives in etcd, the result is
//! bitwise the static job's, the keys go when the job ends, losing any node (node 0 included,
//! with its etcd member) costs the others at most a step, and bad input gets a sentence.

mod launch_util;
mod netns_util;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

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

/// One run of the node drill: 3 agents (`--nnodes 2:3 --fault-tolerance`) through a 3-member
/// cluster; with `victim`, that node's agent, its worker and etcd member `victim` are
/// SIGKILLed once training runs. Returns the survivors' summaries, their stderr, the seconds
/// from the kill to the survivors' next step as they logged it, and whether the member killed
/// was etcd's leader.
fn node_drill(victim: Option<u32>) -> (Vec<(u64, f64, String)>, String, f64, bool) {
    let name = format!("launch_etcd_drill_{victim:?}");
    let mut cluster = EtcdCluster::start(&name, 3, Duration::from_secs(30)).expect("etcd");
    let eps = cluster.endpoints();
    let logs = TempDir::new(&name);
    let begin = Instant::now();
    let nodes: Vec<netns_util::Node> = (0..3)
        .map(|i| {
            let mut c = phalanx();
            c.arg("train")
                .args([
                    "--rdzv-backend",
                    "etcd",
                    "--rdzv-endpoint",
                    &eps,
                    "--rdzv-id",
                    "drill",
                ])
                .args([
                    "--nnodes",
                    "2:3",
                    "--rdzv-last-call",
                    "3",
                    "--nproc-per-node",
                    "1",
                ])
                .args(["--fault-tolerance", "--max-restarts", "1"])
                // 4 epochs: the kill comes once the first has ended, and the time the drill
                // measures is up to the survivors' next step; the other 3 epochs are for the
                // accuracy check against the undisturbed run (with 8, the drill's 4 runs took
                // 89 s of CI's 2 cores).
                .args([
                    "--dataset",
                    "mnist5k",
                    "--epochs",
                    "4",
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
                .env("PHALANX_TOKEN", TOKEN)
                .env("PHALANX_TIMEOUT", "60s");
            netns_util::Node::start(c, logs.path(), i)
        })
        .collect();
    for n in &nodes {
        netns_util::wait_for(n, "round 0: nodes [0, 1, 2]", begin);
    }
    // Node ranks are taken on arrival: find the victim's agent by what it printed.
    let node_rank = |n: &netns_util::Node| -> u32 {
        let err = n.stderr();
        let at = err.find("this is node ").expect("a node rank") + "this is node ".len();
        err[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (mut killed_index, mut killed, mut with_leader) = (None, None, false);
    if let Some(v) = victim {
        // Training runs: the first of 4 epochs ended.
        netns_util::wait_for_epoch(&nodes, begin);
        let i = nodes
            .iter()
            .position(|n| node_rank(n) == v)
            .expect("the victim");
        let agent = nodes[i].child.id() as i32;
        let workers = workers(agent);
        assert_eq!(
            workers.len(),
            1,
            "node {v}'s worker: {workers:?}\n{}",
            nodes[i].stderr()
        );
        with_leader = cluster.leader() == Some(v as usize);
        killed = Some(SystemTime::now());
        cluster.kill(v as usize);
        // SAFETY: plain signals to processes this test started.
        for pid in std::iter::once(agent).chain(workers.iter().map(|w| w.0)) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        killed_index = Some(i);
    }
    let (out, err) = survivors(nodes, killed_index, begin);
    let cost = killed.map_or(0.0, |at| failure_seen_and_next_step_after(&err, at).1);
    (train_summaries(&out), err, cost, with_leader)
}

/// Waits for every node but `lost`; each must exit 0. Their stdout and stderr, joined.
fn survivors(
    nodes: Vec<netns_util::Node>,
    lost: Option<usize>,
    begin: Instant,
) -> (String, String) {
    let (mut out, mut err) = (String::new(), String::new());
    for (i, n) in nodes.into_iter().enumerate() {
        if Some(i) == lost {
            continue;
        }
        let (code, o, e) = n.wait(begin);
        assert_eq!(code, Some(0), "node {i}:\n{e}");
        out.push_str(&o);
        err.push_str(&e);
    }
    (out, err)
}

#[test]
fn losing_any_node_node_0_included_costs_the_others_at_most_a_step() {
    if phalanx_testing::etcd::etcd_binary("node_drill").is_none() {
        return;
    }
    let (calm, _, _, _) = node_drill(None);
    assert_eq!(calm.len(), 3, "{calm:?}");
    for victim in [0, 1, 2] {
        let (s, err, cost, with_leader) = node_drill(Some(victim));
        assert_eq!(s.len(), 2, "node {victim} lost: {s:?}\n{err}");
        assert_eq!(s[0].2, s[1].2, "node {victim} lost: replicas differ\n{err}");
        assert!(
            err.contains(&format!("node {victim} ("))
                && err.contains("the round goes on without it"),
            "{err}"
        );
        assert!(!err.contains("starting attempt"), "no restart: {err}");
        // No work lost: not worse than the undisturbed run by more than 0.03. (Two ranks
        // take more, smaller steps than three over the same epochs, so it may end higher.)
        assert!(
            s[0].1 >= calm[0].1 - 0.03,
            "node {victim} lost: accuracy {} vs {} undisturbed",
            s[0].1,
            calm[0].1
        );
        let (bound, leader) = next_step_bound(with_leader);
        assert!(
            cost < bound,
            "node {victim} lost ({leader}): the next step came {cost:.2} s after\n{err}"
        );
        eprintln!(
            "node {victim} lost ({leader}): next step {cost:.2} s after the kill; accuracy \
             {:.3} (undisturbed {:.3})",
            s[0].1, calm[0].1
        );
    }
}

/// A node lost before the workers' first process group formed: node 2's agent and worker are
/// SIGKILLed as soon as the worker exists (it loads its data and builds its model before it
/// publishes its address, so it never does). The others' first group stops waiting for it
/// once the launcher logged it gone (Note [Watched waits] in phalanx-store), connects the
/// generation without node 2, and they finish with equal replicas, without a restart, long
/// before `PHALANX_TIMEOUT` (120 s here) would have passed. (Before, they waited out the
/// timeout; before that, they failed after it.)
#[test]
fn a_node_lost_before_the_first_group_formed_costs_the_others_seconds_not_the_job() {
    let Some(cluster) = EtcdCluster::start("launch_etcd_early_loss", 3, Duration::from_secs(30))
    else {
        return;
    };
    let eps = cluster.endpoints();
    let logs = TempDir::new("launch_etcd_early_loss");
    let begin = Instant::now();
    let nodes: Vec<netns_util::Node> = (0..3)
        .map(|i| {
            let mut c = phalanx();
            c.arg("train")
                .args(["--rdzv-backend", "etcd", "--rdzv-endpoint", &eps])
                .args(["--rdzv-id", "early-loss", "--nproc-per-node", "1"])
                .args(["--nnodes", "2:3", "--rdzv-last-call", "3"])
                .args(["--fault-tolerance", "--max-restarts", "1"])
                .args([
                    "--dataset",
                    "mnist5k",
                    "--epochs",
                    "1",
                    "--batch-size",
                    "16",
                ])
                .args(["--hidden", "256", "--json"])
                .env("PHALANX_TOKEN", TOKEN)
                .env("PHALANX_TIMEOUT", "120s");
            netns_util::Node::start(c, logs.path(), i)
        })
        .collect();
    for n in &nodes {
        netns_util::wait_for(n, "round 0: nodes [0, 1, 2]", begin);
    }
    let victim = nodes
        .iter()
        .position(|n| n.stderr().contains("this is node 2"))
        .expect("node 2");
    let agent = nodes[victim].child.id() as i32;
    let worker = loop {
        if let Some(&(pid, _)) = workers(agent).first() {
            break pid;
        }
        assert!(begin.elapsed() < DEADLINE, "node 2 started no worker");
        std::thread::sleep(Duration::from_millis(1));
    };
    for pid in [agent, worker] {
        // SAFETY: plain signals to processes this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let killed = Instant::now();
    let (out, err) = survivors(nodes, Some(victim), begin);
    let took = killed.elapsed();
    let s = train_summaries(&out);
    assert_eq!(s.len(), 2, "{s:?}\n{err}");
    assert_eq!(s[0].2, s[1].2, "replicas differ\n{err}");
    assert!(
        err.contains("node 2 (") && err.contains("the round goes on without it"),
        "{err}"
    );
    assert!(
        err.contains("generation 0 did not form")
            && err.contains("left in generation 1 while generation 0 formed"),
        "{err}"
    );
    assert!(!err.contains("starting attempt"), "no restart: {err}");
    // The whole run after the kill, not a wait of 120 s: half of it is a bound no loaded
    // machine reaches unless the wait was not cut short.
    assert!(took < Duration::from_secs(60), "{took:?}\n{err}");
    eprintln!("node 2 lost before the first group: the others finished {took:.1?} after the kill");
}

/// Without `--fault-tolerance`, `--max-restarts` starts the next round without a lost node 0:
/// under etcd nobody hosts the store, and the next round's first agent in closes it (Note
/// [Elastic rounds]). Three agents run `program`, whose workers append `<attempt> <rank>
/// <world size> <group rank>` to `<dir>/log` (`dir` is its last argument) and idle until
/// `<dir>/done` exists; node 0's agent, worker and etcd member are SIGKILLed; the other two
/// must meet again as a world of 2 and finish. Returns the survivors' stderr.
fn restart_without_node_0(test: &str, program: &[&str], python: Option<&Path>) -> String {
    let Some(mut cluster) = EtcdCluster::start(test, 3, Duration::from_secs(30)) else {
        return String::new();
    };
    let eps = cluster.endpoints();
    let dir = TempDir::new(test);
    let begin = Instant::now();
    let nodes: Vec<netns_util::Node> = (0..3)
        .map(|i| {
            let mut c = phalanx();
            c.arg("launch")
                .args(["--rdzv-backend", "etcd", "--rdzv-endpoint", &eps])
                .args(["--rdzv-id", "restart", "--nnodes", "2:3"])
                .args(["--rdzv-last-call", "2", "--max-restarts", "2", "--"])
                .args(program)
                .arg(dir.str())
                .env("PHALANX_TOKEN", TOKEN)
                .env("PHALANX_TIMEOUT", "30s");
            if let Some(py) = python {
                c.env("PHALANX_PYTHON", py);
            }
            netns_util::Node::start(c, dir.path(), i)
        })
        .collect();
    let log = || std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    let wait_log = |want: &dyn Fn(&str) -> bool, what: &str| {
        while !want(&log()) {
            assert!(
                begin.elapsed() < DEADLINE,
                "{what}: log {:?}\n{}",
                log(),
                nodes.iter().map(|n| n.stderr()).collect::<String>()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_log(&|l| l.lines().count() == 3, "three workers in round 0");
    let zero = nodes
        .iter()
        .position(|n| n.stderr().contains("this is node 0"))
        .expect("node 0");
    let agent = nodes[zero].child.id() as i32;
    let pids = wait_for_workers(agent, 1);
    cluster.kill(0);
    // SAFETY: plain signals to processes this test started.
    for pid in std::iter::once(agent).chain(pids.iter().map(|w| w.0)) {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let killed = Instant::now();
    wait_log(
        &|l| l.lines().filter(|l| l.starts_with("1 ")).count() == 2,
        "the next round of two",
    );
    let regrouped = killed.elapsed();
    // Node 0's own keys were attached to its agent's lease (Note [etcd leases] in phalanx-store):
    // etcd deletes them once the keep-alives stop, with nobody freeing them.
    let store = cluster.store("restart");
    while store.check(&["rdzv/etcd/master/0"]).unwrap() {
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "node 0's master address outlived its agent's lease"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let expired = killed.elapsed();
    std::fs::write(dir.path().join("done"), b"").unwrap();
    let mut err = String::new();
    for (i, n) in nodes.into_iter().enumerate() {
        if i == zero {
            continue;
        }
        let (code, _, e) = n.wait(begin);
        assert_eq!(code, Some(0), "node {i}:\n{e}");
        err.push_str(&e);
    }
    // The second attempt: ranks 0 and 1 of 2, group ranks 0 and 1 (node ranks 1 and 2).
    let mut second: Vec<Vec<u32>> = log()
        .lines()
        .filter(|l| l.starts_with("1 "))
        .map(|l| l.split(' ').map(|w| w.parse().unwrap()).collect())
        .collect();
    second.sort();
    assert_eq!(
        second,
        vec![vec![1, 0, 2, 0], vec![1, 1, 2, 1]],
        "{}",
        log()
    );
    assert!(
        err.contains("node 0 (") && err.contains("nodes [1, 2]"),
        "{err}"
    );
    assert!(regrouped < Duration::from_secs(40), "{regrouped:?}\n{err}");
    eprintln!(
        "{test}: regrouped without node 0 {regrouped:?} after the kill; its leased keys gone \
         {expired:?} after"
    );
    err
}

#[test]
fn without_fault_tolerance_max_restarts_goes_on_without_node_0() {
    let script = "d=$0; echo $TORCHELASTIC_RESTART_COUNT $RANK $WORLD_SIZE $GROUP_RANK >> $d/log; \
                  while [ ! -e $d/done ]; do sleep 0.05; done";
    restart_without_node_0("launch_etcd_restart", &["sh", "-c", script], None);
}

/// The same for a PyTorch program that calls `init_process_group("gloo")`: its TCPStore is
/// hosted by rank 0's process at the address the round's first node published, so the round
/// after node 0's loss has it on node 1 (`rdzv/etcd.rs`), and the two ranks meet and reduce.
#[test]
fn a_pytorch_program_meets_again_without_node_0_its_store_on_the_next_node() {
    let Some(py) = torch_python("launch_etcd_torch_restart") else {
        return;
    };
    let script = r#"
import os, sys, time
import torch, torch.distributed as dist
d = sys.argv[1]
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
assert int(t.item()) == dist.get_world_size(), t
with open(os.path.join(d, "log"), "a") as f:
    f.write(f"{os.environ['TORCHELASTIC_RESTART_COUNT']} {dist.get_rank()} "
            f"{dist.get_world_size()} {os.environ['GROUP_RANK']}\n")
while not os.path.exists(os.path.join(d, "done")):
    time.sleep(0.05)
dist.destroy_process_group()
"#;
    let file = TempDir::new("launch_etcd_torch_restart_script");
    let path = file.path().join("meet.py");
    std::fs::write(&path, script).unwrap();
    let err = restart_without_node_0(
        "launch_etcd_torch_restart",
        &[path.to_str().unwrap()],
        Some(&py),
    );
    assert!(!err.is_empty());
}

/// etcd's own failures under a training job (2 agents × 1 rank, checkpoints every 10 steps):
/// - one member of three, the leader, SIGKILLed mid-run changes nothing (Note [An election is
///   not a lost store]): the job ends bitwise equal to the
///   static 1 host × 2 ranks run;
/// - two of three (the quorum) SIGKILLed mid-run: both agents stop within seconds, naming etcd,
///   its endpoints and the lost quorum, the workers commit a checkpoint as they stop, and once
///   the members are back the job resumes from it (`--resume`) and still ends bitwise equal.
#[test]
fn a_lost_member_changes_nothing_and_a_lost_quorum_stops_the_job_with_a_whole_checkpoint() {
    let Some(mut cluster) = EtcdCluster::start("launch_etcd_quorum", 3, Duration::from_secs(30))
    else {
        return;
    };
    let eps = cluster.endpoints();
    // Long enough (about 4,700 steps) that the quorum is lost for good well before the end:
    // the agents wait out an election (`quorum_timeout`, 4 s here) before they call the store
    // lost. etcd draws each member's election timeout between 1 s and 2 s (its default 1 s,
    // randomised up to twice that), so a leader lost on a loaded machine took more than 2 s
    // to replace (seen with 2 s here), and a split vote takes another draw.
    let flags = [
        "--dataset",
        "mnist5k",
        "--epochs",
        "30",
        "--batch-size",
        "16",
        "--hidden",
        "128",
        "--seed",
        "5",
        "--json",
        "--checkpoint-every",
        "10",
        "--resume",
    ];
    let reference = TempDir::new("launch_etcd_quorum_ref");
    let mut args = vec!["--nproc-per-node", "2", "--checkpoint-dir", reference.str()];
    // train_ok gives --json itself.
    args.extend(flags.iter().filter(|&&f| f != "--json"));
    let want = train_summaries(&train_ok(&args, DEADLINE).stdout);
    assert_eq!(want.len(), 2);
    let job = |id: &str, dir: &TempDir| -> Vec<Running> {
        (0..2)
            .map(|_| {
                let mut c = phalanx();
                c.arg("train")
                    .args(["--rdzv-backend", "etcd", "--rdzv-endpoint", &eps])
                    .args(["--rdzv-id", id, "--nnodes", "2", "--nproc-per-node", "1"])
                    .args(["--rdzv-conf", "quorum_timeout=4s"])
                    .args(flags)
                    .args(["--checkpoint-dir", dir.str()])
                    .env("PHALANX_TOKEN", TOKEN)
                    .env("PHALANX_TIMEOUT", "30s");
                start(c)
            })
            .collect()
    };
    // Until both agents' job has checkpointed `step`; an agent that exits first, or the
    // deadline, fails the test with what both agents printed and the members' logs.
    let wait_for_step = |agents: Vec<Running>, dir: &TempDir, step: u64, cluster: &EtcdCluster| {
        let mut agents = agents;
        let begin = Instant::now();
        while newest_step(dir.path()) < step {
            if begin.elapsed() >= DEADLINE || agents.iter_mut().any(Running::exited) {
                let outs: Vec<String> = agents
                    .into_iter()
                    .map(|a| {
                        let f = a.kill();
                        format!(
                            "{:?}\nstdout:\n{}\nstderr:\n{}",
                            f.status, f.stdout, f.stderr
                        )
                    })
                    .collect();
                panic!(
                    "no checkpoint at step {step} after {:?}\n{}\n{}",
                    begin.elapsed(),
                    outs.join("\n"),
                    cluster.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        agents
    };
    let digests = |nodes: Vec<Finished>| -> Vec<String> {
        let mut out = Vec::new();
        for f in nodes {
            assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
            out.extend(train_summaries(&f.stdout).into_iter().map(|s| s.2));
        }
        out
    };

    // One member lost mid-run: the leader, the worst one to lose (the cluster answers
    // nothing until it has elected another).
    let one = TempDir::new("launch_etcd_member_lost");
    let agents = wait_for_step(job("member-lost", &one), &one, 20, &cluster);
    let leader = cluster.leader().expect("a leader");
    cluster.kill(leader);
    let got = digests(agents.into_iter().map(|a| a.wait(DEADLINE)).collect());
    assert_eq!(
        got,
        vec![want[0].2.clone(), want[0].2.clone()],
        "member lost"
    );

    // The quorum lost mid-run (the old leader back first: three members, two of them
    // killed).
    cluster.restart(leader);
    cluster.wait_ready(Duration::from_secs(30));
    let two = TempDir::new("launch_etcd_quorum_lost");
    let agents = wait_for_step(job("quorum-lost", &two), &two, 20, &cluster);
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    for &i in &others {
        cluster.kill(i);
    }
    let killed = Instant::now();
    let stopped: Vec<Finished> = agents.into_iter().map(|a| a.wait(DEADLINE)).collect();
    let took = killed.elapsed();
    for f in &stopped {
        assert_ne!(f.code(), Some(0), "{}", f.stderr);
        assert!(
            f.stderr.contains("lost the job's store in etcd")
                && f.stderr.contains(&eps)
                && f.stderr.contains("lost its quorum"),
            "{}",
            f.stderr
        );
    }
    assert!(
        stopped
            .iter()
            .any(|f| f.stderr.contains("checkpoint") && f.stderr.contains("committed")),
        "no checkpoint committed as the workers stopped:\n{}\n{}",
        stopped[0].stderr,
        stopped[1].stderr
    );
    assert!(took < Duration::from_secs(15), "stopped {took:?} after");
    let at = newest_step(two.path());
    eprintln!("quorum lost: both agents stopped {took:?} after the kill, checkpoint at step {at}");

    // The members come back; the job resumes from that checkpoint and ends as the reference.
    for &i in &others {
        cluster.restart(i);
    }
    cluster.wait_ready(Duration::from_secs(30));
    let resumed: Vec<Finished> = job("quorum-back", &two)
        .into_iter()
        .map(|a| a.wait(DEADLINE))
        .collect();
    let from = format!("{{\"event\":\"resumed\",\"global_step\":{at},");
    assert!(
        resumed.iter().any(|f| f.stdout.contains(&from)),
        "not resumed from step {at}:\n{}\n{}",
        resumed[0].stdout,
        resumed[1].stdout
    );
    let got = digests(resumed);
    assert_eq!(got, vec![want[0].2.clone(), want[0].2.clone()], "resumed");
}

/// A cluster that wants TLS and client certificates (as Kubernetes' etcd does): the agents
/// and their workers reach it with `--rdzv-conf cacert=…,cert=…,key=…`, the workers through
/// `PHALANX_ETCD_CACERT`, `PHALANX_ETCD_CERT` and `PHALANX_ETCD_KEY`.
#[test]
fn two_agents_train_through_a_tls_cluster_with_client_certificates() {
    let files = TempDir::new("launch_etcd_tls_files");
    let Some(tls) = phalanx_testing::etcd::Tls::make("launch_etcd_tls", files.path()) else {
        return;
    };
    let Some(cluster) = EtcdCluster::start_tls("launch_etcd_tls", 3, &tls, Duration::from_secs(30))
    else {
        return;
    };
    let conf = format!(
        "cacert={},cert={},key={}",
        tls.ca.display(),
        tls.client_cert.display(),
        tls.client_key.display()
    );
    let eps = cluster.endpoints();
    let agents: Vec<Running> = (0..2)
        .map(|_| start(etcd_node(&eps, "tls-job", TOKEN, &["--rdzv-conf", &conf])))
        .collect();
    let nodes: Vec<Finished> = agents.into_iter().map(|a| a.wait(DEADLINE)).collect();
    let mut digests = Vec::new();
    for f in &nodes {
        assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
        digests.extend(train_summaries(&f.stdout).into_iter().map(|s| s.2));
    }
    assert_eq!(digests.len(), 2);
    assert_eq!(digests[0], digests[1]);
    // Without the client certificate the members refuse the agent, and it says what to give.
    let f = start(etcd_node(
        &eps,
        "tls-job-2",
        TOKEN,
        &["--rdzv-conf", &format!("cacert={}", tls.ca.display())],
    ))
    .wait(DEADLINE);
    assert_ne!(f.code(), Some(0));
    assert!(
        f.stderr.contains("refused this client's certificate") && f.stderr.contains(&eps),
        "{}",
        f.stderr
    );
}

/// phalanx_torch.ft under `--rdzv-backend etcd --nnodes 2:3 --fault-tolerance`: a whole node
/// lost (rank 1's agent, then its worker, SIGKILLed at step 40 of 200) costs the others a
/// regroup, not a restart. Its workers said they re-form their group (the Manager's
/// `ft/takes_part`), so the round goes on without the node (Rules::goes_on_if_told), and the
/// two others finish as a world of 2 with equal replicas.
#[test]
fn a_phalanx_torch_ft_program_goes_on_without_a_lost_node() {
    let _busy = one_at_a_time();
    let Some(py) = backend_python("launch_etcd_torch_ft") else {
        return;
    };
    let Some(cluster) = EtcdCluster::start("launch_etcd_torch_ft", 3, Duration::from_secs(30))
    else {
        return;
    };
    let eps = cluster.endpoints();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/tests/test_ft.py");
    let agents: Vec<Running> = (0..3)
        .map(|_| {
            let mut c = phalanx();
            c.arg("launch")
                .args(["--rdzv-backend", "etcd", "--rdzv-endpoint", &eps])
                .args([
                    "--rdzv-id",
                    "torch-ft",
                    "--nnodes",
                    "2:3",
                    "--nproc-per-node",
                    "1",
                ])
                .args([
                    "--rdzv-last-call",
                    "5",
                    "--fault-tolerance",
                    "--max-restarts",
                    "1",
                ])
                .arg(&script)
                .args(["api", "--steps", "200", "--kill-at", "40", "--kill-node"])
                .env("PHALANX_TOKEN", TOKEN)
                .env("PHALANX_TIMEOUT", "30s")
                .env("PHALANX_PYTHON", &py);
            start(c)
        })
        .collect();
    let finished: Vec<Finished> = agents.into_iter().map(|a| a.wait(DEADLINE)).collect();
    let dump: String = finished
        .iter()
        .map(|f| format!("{}\n{}\n", f.stdout, f.stderr))
        .collect();
    // The lost agent's own output may end before its worker's "kill at" reached it.
    let (lost, survivors): (Vec<&Finished>, Vec<&Finished>) =
        finished.iter().partition(|f| f.code() != Some(0));
    assert_eq!(lost.len(), 1, "{dump}");
    assert!(lost[0].stderr.contains("this is node 1"), "{dump}");
    let mut results = Vec::new();
    for f in &survivors {
        assert_eq!(f.code(), Some(0), "{dump}");
        assert!(!f.stderr.contains("restart 1 of"), "restarted:\n{dump}");
        results.extend(f.stdout.lines().filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = w.iter().position(|&x| x == "digest")?;
            Some((w.get(at + 1)?.to_string(), w.get(at + 3)?.to_string()))
        }));
    }
    assert!(
        dump.contains("the round goes on without it"),
        "the agents did not go on:\n{dump}"
    );
    assert_eq!(results.len(), 2, "{dump}");
    assert_eq!(results[0], results[1], "replicas differ:\n{dump}");
    assert_eq!(results[0].1, "2", "the survivors' world:\n{dump}");
}
