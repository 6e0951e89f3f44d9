//! Real processes in tests: run a command with a deadline (killed, and the test failed, when
//! it passes), read both streams, check that processes and their children are gone, and
//! start children with no launcher's variables inherited from whatever runs the tests.
#![allow(missing_docs)]

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Removes from `c`'s environment every variable that would make it think a launcher started
/// it or that configures phalanx: torchrun's (`RANK`, `WORLD_SIZE`, …, `PET_*`,
/// `TORCHELASTIC_*`), phalanx's (`PHALANX_*`), MPI's and Slurm's (`OMPI_*`, `PMI_*`,
/// `PMIX_*`, `SLURM_*`), the PyTorch users' variables phalanx falls back to
/// (`GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME`, `NCCL_DEBUG`, `TORCH_DISTRIBUTED_DEBUG`, the
/// flight recorder's `TORCH_FR_*` and `TORCH_NCCL_*`), and `OMP_NUM_THREADS`. Every test
/// that starts phalanx uses it, so the list lives here once.
pub fn clean_env(c: &mut Command) -> &mut Command {
    const NAMES: &[&str] = &[
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "OMP_NUM_THREADS",
        // Read when the PHALANX_ ones are unset (Note [Borrowed variables] in phalanx-core):
        // a developer's cluster profile must not move a test onto another interface.
        "GLOO_SOCKET_IFNAME",
        "NCCL_SOCKET_IFNAME",
        "NCCL_DEBUG",
        "TORCH_DISTRIBUTED_DEBUG",
    ];
    const PREFIXES: &[&str] = &[
        "PET_",
        "PHALANX_",
        "TORCH_FR_",
        "TORCH_NCCL_",
        "TORCHELASTIC_",
        "OMPI_",
        "PMI_",
        "PMIX_",
        "SLURM_",
    ];
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if NAMES.contains(&k.as_str()) || PREFIXES.iter().any(|p| k.starts_with(p)) {
            c.env_remove(&k);
        }
    }
    c
}

/// The name libtest gives the test function `name` of the module `module` (pass
/// `module_path!()`): the module's path without the crate's name. A test that starts its own
/// binary again to run one test of it (`--exact`) names that test through this, so that it is
/// found whether its file is a test binary of its own or a module of one (a crate's
/// integration tests are one binary: docs/architecture.md, "One test binary per crate").
///
/// ```
/// use phalanx_testing::process::test_path;
/// assert_eq!(test_path("learner::learner_zero", "worker"), "learner_zero::worker");
/// assert_eq!(test_path("shm_process", "child_rank"), "child_rank");
/// ```
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, inner)) => format!("{inner}::{name}"),
        None => name.to_string(),
    }
}

/// A running launcher; killed (SIGKILL, its workers follow by PR_SET_PDEATHSIG) when dropped.
pub struct Running {
    pub child: Child,
    pub started: Instant,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
}

/// What a finished launcher left.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Finished {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Asserts the process exited 0, showing both streams when it did not.
    pub fn assert_ok(&self) -> &Self {
        assert_eq!(
            self.code(),
            Some(0),
            "stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }
}

fn reader(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

pub fn start(mut cmd: Command) -> Running {
    let started = Instant::now();
    let mut child = cmd.spawn().expect("spawning phalanx");
    let out = reader(child.stdout.take().unwrap());
    let err = reader(child.stderr.take().unwrap());
    Running {
        child,
        started,
        out: Some(out),
        err: Some(err),
    }
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Whether the launcher has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Kills the launcher (when it still runs) and returns what it printed, for a failure's
    /// message.
    pub fn kill(mut self) -> Finished {
        let _ = self.child.kill();
        let status = self.child.wait().unwrap();
        Finished {
            status,
            stdout: self.out.take().unwrap().join().unwrap_or_default(),
            stderr: self.err.take().unwrap().join().unwrap_or_default(),
            elapsed: self.started.elapsed(),
        }
    }

    /// Waits for the launcher to exit; past `deadline` it is killed and the test fails.
    pub fn wait(mut self, deadline: Duration) -> Finished {
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let elapsed = self.started.elapsed();
                let stdout = self.out.take().unwrap().join().unwrap();
                let stderr = self.err.take().unwrap().join().unwrap();
                return Finished {
                    status,
                    stdout,
                    stderr,
                    elapsed,
                };
            }
            if self.started.elapsed() > deadline {
                let f = self.kill();
                panic!(
                    "phalanx launch still running after {deadline:?}\nstdout:\n{}\nstderr:\n{}",
                    f.stdout, f.stderr
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `cmd` to completion within `deadline`.
pub fn run(cmd: Command, deadline: Duration) -> Finished {
    start(cmd).wait(deadline)
}

/// Makes `cmd` lead a session of its own, so that everything it starts, however deep and
/// whatever process group it moves to, is found afterwards by `session(pid)`.
pub fn in_own_session(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    cmd
}

/// Runs `cmd` in a session of its own (`in_own_session`) within `deadline`, for programs that
/// start daemons of their own (mpirun's ranks, a local Ray cluster).
///
/// Past the deadline the leader is asked to stop (SIGTERM), then, 3 s later, everything in its
/// session is killed and the test fails. When the leader exits in time, whatever it left in its
/// session has `grace` to go; what is still there is then killed and named on stderr. Either
/// way no process of the session outlives the call.
pub fn run_session(mut cmd: Command, deadline: Duration, grace: Duration) -> Finished {
    in_own_session(&mut cmd);
    let mut running = start(cmd);
    let sid = running.pid();
    loop {
        if running.child.try_wait().unwrap().is_some() {
            let finished = running.wait(Duration::from_secs(1));
            let left = kill_session_after(sid, grace);
            if !left.is_empty() {
                say(&format!(
                    "{} of pid {sid}'s session were still running {grace:?} after it exited, \
                     killed: {}",
                    left.len(),
                    left.join("; ")
                ));
            }
            return finished;
        }
        if running.started.elapsed() > deadline {
            // SAFETY: a plain signal to the process this test started.
            unsafe { libc::kill(sid, libc::SIGTERM) };
            kill_session_after(sid, Duration::from_secs(3));
            let f = running.wait(Duration::from_secs(5));
            panic!(
                "{sid} still running after {deadline:?}; its session was killed\nstdout:\n{}\n\
                 stderr:\n{}",
                f.stdout, f.stderr
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to `grace` for session `sid` to empty, then SIGKILLs what is left and returns it
/// as `pid (name)`.
fn kill_session_after(sid: i32, grace: Duration) -> Vec<String> {
    let end = Instant::now() + grace;
    while Instant::now() < end && session(sid).iter().any(|p| alive(*p)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<i32> = session(sid).into_iter().filter(|p| alive(*p)).collect();
    let named = left
        .iter()
        .map(|pid| {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("{pid} ({})", name.trim())
        })
        .collect();
    for pid in &left {
        // SAFETY: a signal to a process of the session this test started.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end && left.iter().any(|p| alive(*p)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    named
}

/// Whether a process with this pid still exists (zombies count as gone).
pub fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
    match stat {
        // Field 3, after the parenthesised command name, is the state; Z is a zombie.
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Waits up to `deadline` for every pid written as `pid.*` files in `dir` to be gone; returns
/// the ones still alive.
pub fn survivors(pids: &[i32], deadline: Duration) -> Vec<i32> {
    let end = Instant::now() + deadline;
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() || Instant::now() > end {
            return left;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pids in the files `dir/<prefix>*`.
pub fn read_pids(dir: &Path, prefix: &str) -> Vec<i32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().starts_with(prefix) {
            if let Ok(s) = std::fs::read_to_string(e.path()) {
                if let Ok(p) = s.trim().parse() {
                    v.push(p);
                }
            }
        }
    }
    v
}

/// Waits until `n` files named `<prefix>*` with a full line exist in `dir`.
pub fn wait_for_files(dir: &Path, prefix: &str, n: usize, deadline: Duration) {
    let end = Instant::now() + deadline;
    while read_pids(dir, prefix).len() < n {
        assert!(
            Instant::now() < end,
            "workers did not start within {deadline:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Lines of `text` that start with `[rank N]: `, as (N, rest).
pub fn rank_lines(text: &str) -> Vec<(u32, String)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("[rank ")?;
            let (n, body) = rest.split_once("]: ")?;
            Some((n.parse().ok()?, body.to_string()))
        })
        .collect()
}

/// Sends a signal (`TERM`, `INT`, …) with kill(1).
pub fn signal(pid: i32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(ok.success(), "kill -{sig} {pid}");
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!("phalanx-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn str(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The launcher's direct children (the workers), by pid.
fn children(launcher: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{launcher}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .flat_map(|t| {
            let c = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            c.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The value of `name` in process `pid`'s environment.
fn env_of(pid: i32, name: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let prefix = format!("{name}=");
    env.split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix(prefix.as_str()).map(str::to_string))
}

/// The launcher's direct children with their RANK.
pub fn workers(launcher: i32) -> Vec<(i32, u32)> {
    children(launcher)
        .into_iter()
        .filter_map(|pid| Some((pid, env_of(pid, "RANK")?.parse().ok()?)))
        .collect()
}

/// The workers' (PHALANX_JOB_ID, PHALANX_TOKEN) once they exist.
pub fn job_credentials(launcher: i32) -> Option<(String, String)> {
    children(launcher).into_iter().find_map(|pid| {
        Some((
            env_of(pid, "PHALANX_JOB_ID")?,
            env_of(pid, "PHALANX_TOKEN")?,
        ))
    })
}

/// Waits (up to 30 s) until the launcher has `n` workers, and returns them.
pub fn wait_for_workers(launcher: i32, n: usize) -> Vec<(i32, u32)> {
    let begin = Instant::now();
    loop {
        let w = workers(launcher);
        if w.len() == n {
            return w;
        }
        assert!(
            begin.elapsed() < Duration::from_secs(30),
            "workers did not start: {w:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Processes whose session id is `sid`.
pub fn session(sid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                // After the parenthesised name: state, ppid, pgrp, session.
                s.rsplit(')')
                    .next()
                    .and_then(|rest| rest.split_whitespace().nth(3)?.parse::<i32>().ok())
                    == Some(sid)
            })
        })
        .collect()
}

/// A Python interpreter that imports `torch`, for the tests of the PyTorch-facing parts:
/// `$PHALANX_TEST_PYTHON`, else the venv `.ci/run` and `../shared/anchors/setup.sh` install
/// (`~/.cache/phalanx-anchors`), else `python3`. `None`, after printing why the caller skips,
/// when none of them has torch.
pub fn torch_python(test: &str) -> Option<std::path::PathBuf> {
    let mut candidates: Vec<std::path::PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("PHALANX_TEST_PYTHON") {
        candidates.push(p.into());
    }
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(Path::new(&home).join(".cache/phalanx-anchors/bin/python"));
    }
    candidates.push("python3".into());
    for py in candidates {
        let ok = Command::new(&py)
            .args([
                "-c",
                "import torch.distributed as d; assert d.is_available()",
            ])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(py);
        }
    }
    say(&format!(
        "SKIPPED {test}: no Python with torch (set PHALANX_TEST_PYTHON, or run .ci/run, which \
         installs it in ~/.cache/phalanx-anchors)"
    ));
    None
}

/// A line on the process's real stderr: the test harness captures `eprintln!` (and
/// `io::stderr()`) and shows it only for failing tests, and a skip must be visible in a passing
/// run's log. A duplicate of fd 2 goes around the capture.
pub fn say(line: &str) {
    use std::io::Write;
    use std::os::fd::AsFd;
    let direct = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .and_then(|fd| writeln!(std::fs::File::from(fd), "{line}"));
    if direct.is_err() {
        eprintln!("{line}");
    }
}
