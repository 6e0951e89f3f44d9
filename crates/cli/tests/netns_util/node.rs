//! A node agent running in the background inside a test host, its output in files the test
//! reads while it runs (the elastic and fault-tolerance tests watch it and kill it).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const DEADLINE: Duration = Duration::from_secs(240);

/// A node agent whose output goes to files the test reads while it runs; killed when dropped.
pub struct Node {
    pub child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Node {
    pub fn start(mut cmd: Command, dir: &Path, i: usize) -> Node {
        let (out, err) = (dir.join(format!("{i}.out")), dir.join(format!("{i}.err")));
        cmd.stdin(Stdio::null())
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap());
        Node {
            child: cmd.spawn().expect("spawning ip netns exec phalanx"),
            out,
            err,
        }
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        super::strip_ansi(&std::fs::read_to_string(&self.err).unwrap_or_default())
    }

    /// Waits for the agent to exit; returns its code, stdout and stderr.
    pub fn wait(mut self, begin: Instant) -> (Option<i32>, String, String) {
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return (s.code(), self.stdout(), self.stderr());
            }
            assert!(
                begin.elapsed() < DEADLINE,
                "node still running after {DEADLINE:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits until `node`'s agent has printed `text`.
pub fn wait_for(node: &Node, text: &str, begin: Instant) {
    while !node.stderr().contains(text) {
        assert!(
            begin.elapsed() < DEADLINE,
            "no {text:?} from the agent:\n{}",
            node.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until one of `nodes` (a `phalanx train --json` job) has printed an epoch's end:
/// its workers' process group formed and trains. A drill's loss comes after it, mid-run; a
/// fixed sleep instead lets a loaded machine cut a node off before the group formed.
pub fn wait_for_epoch(nodes: &[Node], begin: Instant) {
    while !nodes
        .iter()
        .any(|n| n.stdout().contains("\"event\":\"epoch\""))
    {
        assert!(
            begin.elapsed() < DEADLINE,
            "no epoch ended:\n{}",
            nodes
                .iter()
                .map(Node::stderr)
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `newest()` (the newest checkpoint's step) passes `after`: training moves in
/// the current round.
pub fn wait_for_progress(newest: impl Fn() -> u64, after: u64, begin: Instant) -> u64 {
    loop {
        let step = newest();
        if step > after {
            return step;
        }
        assert!(
            begin.elapsed() < DEADLINE,
            "no checkpoint after step {after}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
