//! Two node agents on one machine (`--nnodes 2`, one per `--node-rank`, same master port):
//! rank assignment, failure propagation between nodes, operator errors.

mod launch_util;

use std::process::Command;
use std::time::Duration;

use launch_util::*;

const DEADLINE: Duration = Duration::from_secs(30);
const TOKEN: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn node(port: u16, node_rank: u32, nproc: u32, script: &str) -> Command {
    let mut c = launch_sh(
        &[
            "--nnodes",
            "2",
            "--node-rank",
            &node_rank.to_string(),
            "--nproc-per-node",
            &nproc.to_string(),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            &port.to_string(),
        ],
        script,
    );
    c.env("PHALANX_TOKEN", TOKEN).env("PHALANX_TIMEOUT", "20s");
    c
}

#[test]
fn two_nodes_get_ranks_zero_to_three_exactly_once() {
    let port = free_port();
    let script = "echo R $RANK $WORLD_SIZE $GROUP_RANK $LOCAL_RANK $PHALANX_JOB_ID";
    // Node 1 first: it must wait for node 0's store to appear.
    let n1 = start(node(port, 1, 2, script));
    std::thread::sleep(Duration::from_millis(100));
    let n0 = start(node(port, 0, 2, script));
    let f0 = n0.wait(DEADLINE);
    let f1 = n1.wait(DEADLINE);
    assert_eq!(f0.code(), Some(0), "{f0:?}");
    assert_eq!(f1.code(), Some(0), "{f1:?}");
    let mut seen = Vec::new();
    let mut job_ids = Vec::new();
    for (f, group) in [(&f0, 0), (&f1, 1)] {
        for (rank, body) in rank_lines(&f.stdout) {
            let parts: Vec<&str> = body.split_whitespace().collect();
            assert_eq!(parts[0], "R");
            assert_eq!(parts[1], rank.to_string());
            assert_eq!(parts[2], "4");
            assert_eq!(parts[3], group.to_string());
            assert_eq!(rank, group * 2 + parts[4].parse::<u32>().unwrap());
            seen.push(rank);
            job_ids.push(parts[5].to_string());
        }
    }
    seen.sort();
    assert_eq!(seen, [0, 1, 2, 3]);
    // Both nodes derive the same job id from the shared token.
    assert!(job_ids.iter().all(|j| j == &job_ids[0]), "{job_ids:?}");
}

#[test]
fn a_failure_on_one_node_stops_the_other_and_names_the_rank() {
    let port = free_port();
    let dir = TempDir::new("mnfail");
    let script = format!(
        "echo $$ > {d}/pid.$RANK; \
         if [ $RANK = 3 ]; then while [ $(ls {d} | wc -l) -lt 4 ]; do sleep 0.01; done; echo 'rank 3 broke' >&2; exit 9; fi; \
         exec sleep 30",
        d = dir.str()
    );
    let n0 = start(node(port, 0, 2, &script));
    let n1 = start(node(port, 1, 2, &script));
    let f1 = n1.wait(DEADLINE);
    let f0 = n0.wait(DEADLINE);
    assert_eq!(f1.code(), Some(9), "{f1:?}");
    assert_eq!(f0.code(), Some(9), "{f0:?}");
    for f in [&f0, &f1] {
        assert!(
            f.stderr
                .contains("root cause: rank 3 (local_rank 1, node 1"),
            "{}",
            f.stderr
        );
        assert!(f.elapsed < Duration::from_secs(6), "{:?}", f.elapsed);
    }
    // Node 0 shows node 1's rows too.
    assert!(f0.stderr.contains("rank 3 broke"), "{}", f0.stderr);
    assert_eq!(
        survivors(&read_pids(dir.path(), "pid."), Duration::from_secs(2)),
        Vec::<i32>::new()
    );
}

#[test]
fn two_nodes_restart_together() {
    let port = free_port();
    let script = "echo attempt $TORCHELASTIC_RESTART_COUNT; \
                  if [ $TORCHELASTIC_RESTART_COUNT = 0 ] && [ $RANK = 2 ]; then exit 1; fi; \
                  if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then exec sleep 30; fi";
    // `--max-restarts` and the `2:2` form of --nnodes, on both nodes.
    let mk = |rank: u32, nproc: u32| {
        let mut c = launch_sh(
            &[
                "--nnodes",
                "2:2",
                "--node-rank",
                &rank.to_string(),
                "--nproc-per-node",
                &nproc.to_string(),
                "--master-port",
                &port.to_string(),
                "--max-restarts",
                "1",
            ],
            script,
        );
        c.env("PHALANX_TOKEN", TOKEN).env("PHALANX_TIMEOUT", "20s");
        c
    };
    let n0 = start(mk(0, 2));
    let n1 = start(mk(1, 1));
    let f0 = n0.wait(DEADLINE);
    let f1 = n1.wait(DEADLINE);
    assert_eq!(f0.code(), Some(0), "{f0:?}");
    assert_eq!(f1.code(), Some(0), "{f1:?}");
    let count = |s: &str, a: &str| rank_lines(s).iter().filter(|(_, b)| b == a).count();
    assert_eq!(count(&f0.stdout, "attempt 1"), 2, "{}", f0.stdout);
    assert_eq!(count(&f1.stdout, "attempt 1"), 1, "{}", f1.stdout);
    assert_eq!(rank_lines(&f1.stdout)[0].0, 2);
}

#[test]
fn duplicate_node_rank_and_inconsistent_nnodes_are_refused() {
    let port = free_port();
    let dir = TempDir::new("dup");
    let script = format!("echo $$ > {}/pid.$RANK; exec sleep 30", dir.str());
    let n0 = start(node(port, 0, 1, &script));
    let n1 = start(node(port, 1, 1, &script));
    wait_for_files(dir.path(), "pid.", 2, DEADLINE);
    let f = run(node(port, 1, 1, "true"), DEADLINE);
    assert_ne!(f.code(), Some(0));
    assert!(
        f.stderr.contains("two agents claim --node-rank 1"),
        "{}",
        f.stderr
    );
    signal(n0.pid(), "TERM");
    let f0 = n0.wait(DEADLINE);
    let f1 = n1.wait(DEADLINE);
    assert_eq!(f0.code(), Some(143), "{f0:?}");
    // Node 0's agent was stopped: node 1 is told, and stops too.
    assert_ne!(f1.code(), Some(0), "{f1:?}");
    assert!(f1.stderr.contains("node 0"), "{}", f1.stderr);
    assert_eq!(
        survivors(&read_pids(dir.path(), "pid."), Duration::from_secs(2)),
        Vec::<i32>::new()
    );
}

#[test]
fn nnodes_mismatch_is_named() {
    let port = free_port();
    let n0 = start(node(port, 0, 1, "true"));
    let mut c = launch_sh(
        &[
            "--nnodes",
            "3",
            "--node-rank",
            "1",
            "--master-port",
            &port.to_string(),
        ],
        "true",
    );
    c.env("PHALANX_TOKEN", TOKEN).env("PHALANX_TIMEOUT", "3s");
    let n1 = start(c);
    let f0 = n0.wait(DEADLINE);
    let f1 = n1.wait(DEADLINE);
    assert_ne!(f0.code(), Some(0));
    assert!(
        f0.stderr.contains("--nnodes 3") && f0.stderr.contains("WORLD_SIZE"),
        "{}",
        f0.stderr
    );
    assert_ne!(f1.code(), Some(0), "{f1:?}");
}

#[test]
fn a_node_running_another_program_is_named_by_both() {
    // Node 1's script differs (`:` for `true`): a warning on both consoles, not a refusal
    // (nodes may differ in a per-node argument); the job runs.
    let port = free_port();
    let n0 = start(node(port, 0, 1, "true"));
    let n1 = start(node(port, 1, 1, ":"));
    let (f0, f1) = (n0.wait(DEADLINE), n1.wait(DEADLINE));
    assert_eq!(f0.code(), Some(0), "{f0:?}");
    assert_eq!(f1.code(), Some(0), "{f1:?}");
    assert!(
        f0.stderr
            .contains("warning: node 1 runs `sh -c :` but this node (node 0) runs `sh -c true`"),
        "{}",
        f0.stderr
    );
    assert!(
        f1.stderr
            .contains("warning: this node (node 1) runs `sh -c :` but node 0 runs `sh -c true`"),
        "{}",
        f1.stderr
    );
    // The same program, launch flags aside: no warning.
    let port = free_port();
    let n0 = start(node(port, 0, 2, "true"));
    let n1 = start(node(port, 1, 1, "true"));
    let (f0, f1) = (n0.wait(DEADLINE), n1.wait(DEADLINE));
    assert!(
        !f0.stderr.contains("warning") && !f1.stderr.contains("warning"),
        "{f0:?}\n{f1:?}"
    );
}

#[test]
fn a_wrong_token_cannot_join() {
    let port = free_port();
    let n0 = start(node(port, 0, 1, "true"));
    let mut c = node(port, 1, 1, "true");
    c.env("PHALANX_TOKEN", "ffff").env("PHALANX_TIMEOUT", "2s");
    let f1 = run(c, DEADLINE);
    assert_ne!(f1.code(), Some(0));
    assert!(
        f1.stderr.contains("cannot reach the store of node 0"),
        "{}",
        f1.stderr
    );
    drop(n0);
}

#[test]
fn a_killed_agent_is_named_by_the_other_node_within_its_heartbeat_timeout() {
    // Node 1's agent is SIGKILLed while every worker sleeps: no collective would ever fail,
    // only the heartbeat tells node 0 (Note [Agent heartbeats]: 5 s).
    let port = free_port();
    let n0 = start(node(port, 0, 1, "sleep 60"));
    let n1 = start(node(port, 1, 1, "sleep 60"));
    let agent1 = n1.pid();
    wait_for_workers(agent1, 1);
    let killed = std::time::Instant::now();
    signal(agent1, "KILL");
    let f0 = n0.wait(Duration::from_secs(30));
    let noticed = killed.elapsed();
    assert_ne!(f0.code(), Some(0), "{f0:?}");
    assert!(
        f0.stderr.contains("root cause: node 1 (host ")
            && f0.stderr.contains("its agent stopped its heartbeat"),
        "{}",
        f0.stderr
    );
    // The timeout (5 s), one read interval, and the stop of node 0's own worker.
    assert!(
        noticed < Duration::from_secs(20),
        "noticed after {noticed:?}"
    );
    drop(n1);
}
