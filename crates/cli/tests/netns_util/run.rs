//! Running node agents inside the test hosts: their outputs, deadlines, background processes.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One finished node agent.
#[derive(Debug)]
pub struct Finished {
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error, ANSI colours removed.
    pub stderr: String,
}

impl Finished {
    /// Exit code.
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

struct Node {
    child: Child,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn reader(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// A background process (a standalone store): killed when dropped.
pub struct Background(Node);

/// Starts `cmd` in the background, its output collected.
pub fn background(mut cmd: Command) -> Background {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawning a background process");
    let out = reader(child.stdout.take().unwrap());
    let err = reader(child.stderr.take().unwrap());
    Background(Node {
        child,
        out: Some(out),
        err: Some(err),
    })
}

impl Background {
    /// Stops the process (SIGKILL) and returns what it printed (stdout, stderr).
    pub fn stop(mut self) -> (String, String) {
        let _ = self.0.child.kill();
        let _ = self.0.child.wait();
        let out = self.0.out.take().unwrap().join().unwrap_or_default();
        let err = self.0.err.take().unwrap().join().unwrap_or_default();
        (out, strip_ansi(&err))
    }
}

/// Removes ANSI escape sequences (`ESC [ … letter`).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Starts every command at once and waits for all of them; past `deadline` every one still
/// running is killed and the test fails with what each printed.
pub fn run_all(cmds: Vec<Command>, deadline: Duration) -> Vec<Finished> {
    let started = Instant::now();
    let mut nodes: Vec<Node> = cmds
        .into_iter()
        .map(|mut c| {
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = c.spawn().expect("spawning ip netns exec phalanx");
            let out = reader(child.stdout.take().unwrap());
            let err = reader(child.stderr.take().unwrap());
            Node {
                child,
                out: Some(out),
                err: Some(err),
            }
        })
        .collect();
    let mut status: Vec<Option<ExitStatus>> = vec![None; nodes.len()];
    while status.iter().any(Option::is_none) && started.elapsed() < deadline {
        for (n, s) in nodes.iter_mut().zip(status.iter_mut()) {
            if s.is_none() {
                *s = n.child.try_wait().expect("waiting for a node");
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let timed_out = status.iter().any(Option::is_none);
    let mut done = Vec::new();
    for (mut n, s) in nodes.into_iter().zip(status) {
        let s = match s {
            Some(s) => s,
            None => {
                let _ = n.child.kill();
                n.child.wait().expect("reaping a node")
            }
        };
        done.push(Finished {
            status: s,
            stdout: n.out.take().unwrap().join().unwrap_or_default(),
            stderr: strip_ansi(&n.err.take().unwrap().join().unwrap_or_default()),
        });
    }
    assert!(
        !timed_out,
        "nodes still running after {deadline:?}:\n{}",
        dump(&done)
    );
    done
}

/// Every node's exit status and output, for assertion messages.
pub fn dump(nodes: &[Finished]) -> String {
    nodes
        .iter()
        .enumerate()
        .map(|(i, f)| {
            format!(
                "--- node {i}: {:?}\nstdout:\n{}\nstderr:\n{}",
                f.status, f.stdout, f.stderr
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Asserts that every node exited 0.
pub fn assert_all_ok(nodes: &[Finished]) {
    assert!(
        nodes.iter().all(|f| f.code() == Some(0)),
        "a node failed:\n{}",
        dump(nodes)
    );
}
