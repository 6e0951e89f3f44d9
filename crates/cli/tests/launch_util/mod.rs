//! Helpers for the `phalanx` CLI tests: the real binary with a clean environment, and the
//! process harness of `phalanx_testing::process` (deadlines, both streams, no survivors).
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use phalanx_testing::process::*;

/// A `phalanx` command with a clean environment (no launcher, `PET_*` or `PHALANX_*`
/// variables inherited from whatever runs the tests) and both streams piped.
pub fn phalanx() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_phalanx"));
    clean_env(&mut c)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A `phalanx launch` command with these flags and `sh -c script`.
pub fn launch_sh(flags: &[&str], script: &str) -> Command {
    let mut c = phalanx();
    c.arg("launch").args(flags).args(["--", "sh", "-c", script]);
    c
}

/// `phalanx train --standalone --json ARGS`, which must succeed within `deadline`.
pub fn train_ok(args: &[&str], deadline: Duration) -> Finished {
    let mut cmd = phalanx();
    cmd.arg("train").args(["--standalone", "--json"]).args(args);
    let f = run(cmd, deadline);
    assert_eq!(
        f.code(),
        Some(0),
        "phalanx train {args:?}\nstdout:\n{}\nstderr:\n{}",
        f.stdout,
        f.stderr
    );
    f
}

/// The `{"event":"summary",…}` objects of `phalanx train --json`: (rank, accuracy, digest).
///
/// Found as objects, not lines: `mpirun` forwards each rank's output in chunks, so another
/// rank's summary can land in the middle of rank 0's epoch line (seen in CI). A summary is
/// one flat object written with one `write`, so it arrives whole.
pub fn train_summaries(stdout: &str) -> Vec<(u64, f64, String)> {
    let mut v: Vec<_> = stdout
        .match_indices("{\"event\":\"summary\"")
        .map(|(at, _)| {
            let j = &stdout[at..];
            let j = &j[..j.find('}').map_or(j.len(), |end| end + 1)];
            let field = |k: &str| {
                let at = j
                    .find(&format!("\"{k}\":"))
                    .unwrap_or_else(|| panic!("no {k:?} in summary {j}"))
                    + k.len()
                    + 3;
                j[at..]
                    .split([',', '}'])
                    .next()
                    .unwrap()
                    .trim_matches('"')
                    .to_string()
            };
            (
                field("rank").parse().unwrap(),
                field("test_accuracy").parse().unwrap(),
                field("param_digest"),
            )
        })
        .collect();
    v.sort_by_key(|s| s.0);
    v
}

/// The step of the newest checkpoint (`step-<n>.json`) in `dir`, 0 before the first.
pub fn newest_step(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let n = e.file_name().into_string().ok()?;
                    n.strip_prefix("step-")?.strip_suffix(".json")?.parse().ok()
                })
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Held for the whole of a test that keeps every core busy by itself (several ranks of
/// PyTorch or of a GPT, each importing or computing flat out): such tests of one binary run one
/// after another, not beside each other. On CI's 2 cores, torch_backend.rs's 9 tests took 316 s
/// two at a time and 198 s one at a time: two of them together only take turns on the cores,
/// and their ranks, switched in and out, each run slower. Tests that mostly wait (on a timeout,
/// a killed process, a daemon) do not take it.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static BUSY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed while holding it has said so; the next one still runs.
    BUSY.lock().unwrap_or_else(|e| e.into_inner())
}

/// A Python with torch in which `phalanx_torch` imports, or `None` after saying why not.
pub fn backend_python(test: &str) -> Option<std::path::PathBuf> {
    let py = torch_python(test)?;
    let ok = std::process::Command::new(&py)
        .args(["-c", "import phalanx_torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        say(&format!(
            "SKIPPED {test}: phalanx_torch is not installed in {} (`pip install ./python`; \
             .ci/run does it)",
            py.display()
        ));
        return None;
    }
    Some(py)
}

/// From the survivors' stderr after a node was lost under `--fault-tolerance`: (seconds from
/// the kill to when the link noticed it, seconds from then to the next step), read from
/// "link closed without a goodbye X s ago" and "re-formed with ranks … completed Y s after".
pub fn link_notice_and_next_step(err: &str) -> (f64, f64) {
    let number_after = |text: &str, marker: &str| -> Option<f64> {
        let at = text.find(marker)? + marker.len();
        text[at..].split(' ').next()?.parse().ok()
    };
    let noticed = number_after(err, "link closed without a goodbye ")
        .unwrap_or_else(|| panic!("the survivors did not notice by the link:\n{err}"));
    let at = err
        .find("re-formed with ranks")
        .unwrap_or_else(|| panic!("no regroup:\n{err}"));
    let step = number_after(&err[at..], "completed ").unwrap_or_else(|| panic!("{err}"));
    (noticed, step)
}

/// A node drill's bound on the seconds from the kill to the survivors' next step, and how the
/// drill stood with etcd's leader, in words. The closing note's bound is 1 s (release); a
/// loaded CI machine gets slack. etcd's leader lost costs an election first: its followers
/// campaign 1 to 2 s (the election timeout, randomized up to twice it) after the leader's
/// last heartbeat, a split vote draws again, and the departure's record and the regroup's
/// writes go through the new leader (1.7 to 3.5 s measured in a debug build, idle machine).
pub fn next_step_bound(with_leader: bool) -> (f64, &'static str) {
    match with_leader {
        true => (6.0, "with etcd's leader"),
        false => (3.0, "etcd's leader elsewhere"),
    }
}

/// Seconds from `killed` to a survivor's failure seen (the wall clock of its "re-forming it"
/// warning) and to its first step after the regroup (that, plus the regroup's own "completed
/// X s after the change"), from the survivors' stderr (`err`). Measured from the kill, not
/// from the failure seen, since a survivor may see it late (a step blocked on the store). A
/// survivor that met the new generation at a step boundary instead, with no collective
/// failed, logs no warning: then `None` and the agent's notice plus the regroup's time.
pub fn failure_seen_and_next_step_after(err: &str, killed: SystemTime) -> (Option<f64>, f64) {
    let of_day = |t: SystemTime| {
        let s = t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
        s % 86_400.0
    };
    let (noticed, step) = link_notice_and_next_step(err);
    // `2026-12-07T05:45:13.831373Z  WARN fault tolerance: … re-forming it`, in UTC.
    let seen = err
        .lines()
        .find(|l| l.contains("re-forming it"))
        .and_then(|l| l.split(['T', 'Z']).nth(1))
        .and_then(|hms| {
            let mut parts = hms.split(':').map(|p| p.parse::<f64>().ok());
            Some(parts.next()?? * 3600.0 + parts.next()?? * 60.0 + parts.next()??)
        })
        .map(|seen| (seen - of_day(killed)).rem_euclid(86_400.0));
    (seen, seen.map_or(noticed, |s| s) + step)
}

/// A run SIGKILLed mid-way: what it printed, how long after the kill its launcher exited, and
/// whether every worker was gone within a second of that.
pub struct Killed {
    pub finished: Finished,
    pub took: Duration,
    pub victim: i32,
    pub left: Vec<i32>,
}

/// Starts `cmd` (a launcher of `world` workers), lets it run for `after`, SIGKILLs the worker
/// of rank `victim_rank`, and waits up to `deadline` for the launcher to exit.
pub fn kill_mid_run(
    cmd: Command,
    world: usize,
    victim_rank: u32,
    after: Duration,
    deadline: Duration,
) -> Killed {
    let job = start(cmd);
    let procs = wait_for_workers(job.pid(), world);
    std::thread::sleep(after);
    let victim = procs
        .iter()
        .find(|(_, r)| *r == victim_rank)
        .expect("the victim's rank is among the workers")
        .0;
    let killed = std::time::Instant::now();
    // SAFETY: a plain kill(2) of a worker this test started.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let finished = job.wait(deadline);
    let took = killed.elapsed();
    let pids: Vec<i32> = procs.iter().map(|(p, _)| *p).collect();
    Killed {
        finished,
        took,
        victim,
        left: survivors(&pids, Duration::from_secs(1)),
    }
}
