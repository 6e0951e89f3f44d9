//! One worker process: spawned in its own process group with `PR_SET_PDEATHSIG(SIGKILL)` (it
//! dies with the agent), its output pumped, its exit reported on a channel by a waiter thread.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc::Sender;
use std::time::Instant;

use crate::output::{Pump, Sink};
use crate::signals::{kill_group, signal_name};
use crate::Error;

/// How a worker ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

impl Exit {
    pub(crate) fn from_status(s: std::process::ExitStatus) -> Exit {
        match (s.code(), s.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(sig)) => Exit::Signal(sig),
            // Neither a code nor a signal cannot happen for a waited-for child on Unix.
            (None, None) => Exit::Code(255),
        }
    }

    pub(crate) fn success(self) -> bool {
        self == Exit::Code(0)
    }

    /// `exit code 3` or `signal 9 (SIGKILL)`.
    pub(crate) fn describe(self) -> String {
        match self {
            Exit::Code(c) => format!("exit code {c}"),
            Exit::Signal(s) => format!("signal {s} ({})", signal_name(s)),
        }
    }

    /// The shell's convention: the code, or 128 + signal.
    pub(crate) fn shell_code(self) -> u8 {
        match self {
            Exit::Code(c) => u8::try_from(c).ok().filter(|&c| c != 0).unwrap_or(1),
            Exit::Signal(s) => u8::try_from(128 + s).unwrap_or(1),
        }
    }
}

/// A worker's exit, sent by its waiter thread.
pub(crate) struct Exited {
    pub(crate) local_rank: u32,
    pub(crate) exit: Exit,
    pub(crate) at: Instant,
}

/// A started worker.
pub(crate) struct Worker {
    pub(crate) local_rank: u32,
    pub(crate) rank: u32,
    pub(crate) pid: u32,
    pub(crate) exit: Option<(Exit, Instant)>,
    /// Whether the agent sent it a signal (its exit is then a consequence, not a cause).
    pub(crate) stopped_by_agent: bool,
    pub(crate) stdout: Pump,
    pub(crate) stderr: Pump,
    pub(crate) error_file: Option<PathBuf>,
}

/// What to start for one local rank.
pub(crate) struct Spec<'a> {
    pub(crate) program: &'a OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) local_rank: u32,
    pub(crate) rank: u32,
    pub(crate) stdout: Sink,
    pub(crate) stderr: Sink,
    pub(crate) error_file: Option<PathBuf>,
}

impl Worker {
    /// Starts a worker. Must be called from the thread that lives as long as the agent:
    /// `PR_SET_PDEATHSIG` fires when the *thread* that forked the worker exits.
    pub(crate) fn spawn(spec: Spec<'_>, events: &Sender<Exited>) -> Result<Worker, Error> {
        let mut cmd = Command::new(spec.program);
        cmd.args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Own process group: the terminal's Ctrl-C reaches only the agent, and the agent
            // can signal the worker together with anything it started.
            .process_group(0);
        // SAFETY: getpid is async-signal-safe and called before fork.
        let agent_pid = unsafe { libc::getpid() };
        // SAFETY: only async-signal-safe calls (prctl, getppid) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                // The agent died between fork and prctl: the death signal would never come.
                if libc::getppid() != agent_pid {
                    return Err(io::Error::other("the launcher exited during start-up"));
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| Error::Spawn {
            local_rank: spec.local_rank,
            program: spec.program.to_string_lossy().into_owned(),
            reason: e.to_string(),
        })?;
        let pid = child.id();
        let stdout = Pump::start(child.stdout.take().expect("piped stdout"), spec.stdout);
        let stderr = Pump::start(child.stderr.take().expect("piped stderr"), spec.stderr);
        let tx = events.clone();
        let local_rank = spec.local_rank;
        std::thread::Builder::new()
            .name(format!("phalanx-launch-wait-{local_rank}"))
            .spawn(move || {
                let exit = match child.wait() {
                    Ok(s) => Exit::from_status(s),
                    Err(_) => Exit::Code(255),
                };
                let _ = tx.send(Exited {
                    local_rank,
                    exit,
                    at: Instant::now(),
                });
            })
            .expect("spawning a waiter thread");
        Ok(Worker {
            local_rank,
            rank: spec.rank,
            pid,
            exit: None,
            stopped_by_agent: false,
            stdout,
            stderr,
            error_file: spec.error_file,
        })
    }

    /// Sends `sig` to the worker's process group. The group outlives a reaped leader while
    /// anything the worker started still runs, so this also reaches grandchildren.
    pub(crate) fn signal(&mut self, sig: i32) {
        if self.exit.is_none() {
            self.stopped_by_agent = true;
        }
        kill_group(self.pid, sig);
    }

    /// The last stderr line, or failing that the last stdout line.
    pub(crate) fn last_line(&self) -> Option<String> {
        self.stderr.last_line().or_else(|| self.stdout.last_line())
    }
}

/// Records an exit event on its worker.
pub(crate) fn record(workers: &mut [Worker], ev: Exited) {
    if let Some(w) = workers.iter_mut().find(|w| w.local_rank == ev.local_rank) {
        w.exit = Some((ev.exit, ev.at));
    }
}
