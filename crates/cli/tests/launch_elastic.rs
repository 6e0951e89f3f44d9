//! Elastic membership through the real binary (`--nnodes 2:3`, Note [Elastic rounds]): three
//! node agents on this machine, one port. The job starts with two nodes, a third one joins at
//! the next round (scale up), one whose whole process tree is SIGKILLed is left out of the round
//! after (scale down), and the job ends with the two that remain. Bad ranges are named.

mod launch_util;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use launch_util::*;

const DEADLINE: Duration = Duration::from_secs(90);
const TOKEN: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn node(port: u16, node_rank: u32, nnodes: &str, script: &str) -> Command {
    let mut c = launch_sh(
        &[
            "--nnodes",
            nnodes,
            "--node-rank",
            &node_rank.to_string(),
            "--master-port",
            &port.to_string(),
            "--rdzv-last-call",
            "1",
            "--max-restarts",
            "3",
        ],
        script,
    );
    c.env("PHALANX_TOKEN", TOKEN).env("PHALANX_TIMEOUT", "20s");
    c
}

/// The rounds the workers reported: (round, rank, world size, group rank, group world size).
fn seen(dir: &Path) -> Vec<(u32, u32, u32, u32, u32)> {
    let text = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let v: Vec<u32> = l
                .split_whitespace()
                .map(|w| w.parse())
                .collect::<Result<_, _>>()
                .ok()?;
            (v.len() == 5).then(|| (v[0], v[1], v[2], v[3], v[4]))
        })
        .collect()
}

/// Waits until some round after `after` has `world` workers reporting, all with that world
/// size; returns the round.
fn wait_for_round(dir: &Path, after: Option<u32>, world: u32) -> u32 {
    let start = Instant::now();
    loop {
        let s = seen(dir);
        let mut rounds: Vec<u32> = s.iter().map(|x| x.0).collect();
        rounds.sort();
        rounds.dedup();
        for r in rounds.into_iter().filter(|&r| after.is_none_or(|a| r > a)) {
            let of: Vec<_> = s.iter().filter(|x| x.0 == r).collect();
            if of.len() as u32 == world && of.iter().all(|x| x.2 == world) {
                let mut ranks: Vec<u32> = of.iter().map(|x| x.1).collect();
                ranks.sort();
                assert_eq!(ranks, (0..world).collect::<Vec<_>>(), "round {r}: {s:?}");
                return r;
            }
        }
        assert!(
            start.elapsed() < DEADLINE,
            "no round after {after:?} with {world} workers: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn nodes_join_at_the_next_round_and_a_lost_node_is_left_out() {
    let port = free_port();
    let dir = TempDir::new("elastic");
    let d = dir.str();
    // Each worker reports its place, then idles until the test says the job is over.
    let script = format!(
        "echo $TORCHELASTIC_RESTART_COUNT $RANK $WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE >> {d}/log; \
         while [ ! -e {d}/done ]; do sleep 0.05; done"
    );
    let n0 = start(node(port, 0, "2:3", &script));
    let n1 = start(node(port, 1, "2:3", &script));
    let first = wait_for_round(dir.path(), None, 2);

    // Scale up: node 2 arrives while round `first` runs.
    let n2 = start(node(port, 2, "2:3", &script));
    let grown = wait_for_round(dir.path(), Some(first), 3);
    let s = seen(dir.path());
    assert!(
        s.iter().filter(|x| x.0 == grown).all(|x| x.4 == 3),
        "three nodes in round {grown}: {s:?}"
    );

    // Scale down: node 1's agent and its worker are SIGKILLed (its host is gone).
    let workers1 = wait_for_workers(n1.pid(), 1);
    // SAFETY: plain signals to processes this test started; a worker may already be gone
    // with its agent (its parent-death signal), so failures are ignored.
    for pid in std::iter::once(n1.pid()).chain(workers1.iter().map(|w| w.0)) {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let killed = Instant::now();
    let shrunk = wait_for_round(dir.path(), Some(grown), 2);
    let regrouped = killed.elapsed();
    std::fs::write(dir.path().join("done"), b"").unwrap();
    let (f0, f2) = (n0.wait(DEADLINE), n2.wait(DEADLINE));
    drop(n1);
    assert_eq!(f0.code(), Some(0), "{f0:?}");
    assert_eq!(f2.code(), Some(0), "{f2:?}");
    // The last round: nodes 0 and 2, group ranks 0 and 1.
    let last: Vec<_> = seen(dir.path())
        .into_iter()
        .filter(|x| x.0 == shrunk)
        .collect();
    let mut groups: Vec<u32> = last.iter().map(|x| x.3).collect();
    groups.sort();
    assert_eq!(groups, vec![0, 1], "{last:?}");
    assert!(
        f0.stderr.contains("a node waits to join")
            && f0.stderr.contains("node 1 (host ")
            && f0.stderr.contains("its agent stopped its heartbeat")
            && f0.stderr.contains("nodes [0, 2]"),
        "{}",
        f0.stderr
    );
    // The heartbeat bound (5 s), a read interval, the last call (1 s) and the restart.
    assert!(
        regrouped < Duration::from_secs(20),
        "regrouped {regrouped:?} after the kill"
    );
    eprintln!("regrouped without node 1 {regrouped:?} after the kill");
}

#[test]
fn bad_ranges_and_disagreeing_nodes_are_named() {
    for (range, why) in [
        ("3:2", "MIN larger than MAX"),
        ("0:2", "positive integer"),
        ("2:x", "positive integer"),
    ] {
        let f = run(node(free_port(), 0, range, "true"), DEADLINE);
        assert_eq!(f.code(), Some(2), "{range}: {f:?}");
        assert!(
            f.stderr.contains("--nnodes") && f.stderr.contains(why),
            "{range}: {}",
            f.stderr
        );
    }
    // A node started with another range is named by node 0, and nothing starts.
    let port = free_port();
    let n0 = start(node(port, 0, "2:3", "true"));
    let n1 = start(node(port, 1, "1:3", "true"));
    let (f0, f1) = (n0.wait(DEADLINE), n1.wait(DEADLINE));
    assert_ne!(f0.code(), Some(0), "{f0:?}");
    assert_ne!(f1.code(), Some(0), "{f1:?}");
    assert!(
        f0.stderr.contains("node 1 was started with --nnodes 1:3")
            && f0.stderr.contains("with --nnodes 2:3"),
        "{}",
        f0.stderr
    );
    assert!(f1.stderr.contains("--nnodes 1:3"), "{}", f1.stderr);
    // A node with another program: named by both, in a warning.
    let port = free_port();
    let n0 = start(node(port, 0, "2:3", "exit 0"));
    let n1 = start(node(port, 1, "2:3", "true"));
    let (f0, f1) = (n0.wait(DEADLINE), n1.wait(DEADLINE));
    for f in [&f0, &f1] {
        assert_eq!(f.code(), Some(0), "{f:?}");
        assert!(
            f.stderr.contains("runs `sh -c true` but") && f.stderr.contains("runs `sh -c exit 0`"),
            "{}",
            f.stderr
        );
    }
}
