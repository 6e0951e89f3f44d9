//! The child processes that hold the ranks' connections (Note [Ranks in several processes]).

use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
};

use anyhow::{bail, Context};
use phalanx_store::Auth;

use super::timing::{monotonic_ns, seconds};

/// The child processes that hold the ranks' connections (Note [Ranks in several processes]).
pub(super) struct Parts {
    pub(super) children: Vec<(Child, ChildStdin, BufReader<ChildStdout>)>,
}

impl Parts {
    /// Starts children of this binary holding `world` ranks' connections to `addr`, at most
    /// `per_child` each.
    pub(super) fn start(
        addr: &str,
        auth: &Auth,
        world: usize,
        per_child: usize,
    ) -> anyhow::Result<Parts> {
        let exe = std::env::current_exe().context("finding this program to start its parts")?;
        let mut parts = Parts {
            children: Vec::new(),
        };
        for first in (0..world).step_by(per_child) {
            let n = per_child.min(world - first);
            let mut child = Command::new(&exe)
                .args(["bench", "rendezvous", "--part-of", addr])
                .args(["--ranks", &world.to_string()])
                .args(["--part-first", &first.to_string()])
                .args(["--part-ranks", &n.to_string()])
                .envs(auth.env_vars())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .with_context(|| {
                    format!("starting the part that holds ranks {first}..{}", first + n)
                })?;
            let stdin = child.stdin.take().expect("piped");
            let stdout = BufReader::new(child.stdout.take().expect("piped"));
            parts.children.push((child, stdin, stdout));
        }
        parts.expect_all("connected")?;
        Ok(parts)
    }

    pub(super) fn repeat(&mut self, it: usize) -> anyhow::Result<f64> {
        self.tell_all(&format!("prep {it}"))?;
        self.expect_all(&format!("ready {it}"))?;
        let t0 = monotonic_ns();
        self.tell_all(&format!("go {it}"))?;
        let last = self.expect_all(&format!("done {it}"))?;
        // Note [Ranks leave after the clock stops]: in every child at once.
        self.tell_all(&format!("leave {it}"))?;
        self.expect_all(&format!("left {it}"))?;
        Ok(seconds(last.saturating_sub(t0)))
    }

    fn tell_all(&mut self, line: &str) -> anyhow::Result<()> {
        for (i, (_, stdin, _)) in self.children.iter_mut().enumerate() {
            writeln!(stdin, "{line}").with_context(|| format!("part {i} is gone"))?;
        }
        Ok(())
    }

    /// Reads `want` from every child, each line optionally followed by a number: returns the
    /// largest.
    fn expect_all(&mut self, want: &str) -> anyhow::Result<u64> {
        let mut most = 0;
        for (i, (_, _, stdout)) in self.children.iter_mut().enumerate() {
            let mut line = String::new();
            stdout.read_line(&mut line)?;
            let said = line.trim();
            let number = said.strip_prefix(want).map(str::trim);
            match number.map(|n| {
                if n.is_empty() {
                    Ok(0)
                } else {
                    n.parse::<u64>()
                }
            }) {
                Some(Ok(n)) => most = most.max(n),
                _ => bail!("part {i} said {said:?} where {want:?} was due (its error is above)"),
            }
        }
        Ok(most)
    }
}

impl Drop for Parts {
    fn drop(&mut self) {
        for (child, ..) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
