//! `phalanx train --outer … --fault-tolerance`: islands that leave and join (Note [Islands
//! that leave and join] in phalanx-ddp, Note [Whole blocks] in phalanx-pg), drilled through the
//! real launcher on 4 ranks in 2 islands of 2. An island SIGKILLed mid-run (both its ranks, or
//! one, which leaves the other alone): the other island goes on from its next outer sync or
//! epoch end, within a second; the replacements join at an outer boundary and take the global
//! parameters and outer state from the surviving island; after the last sync every rank of
//! every island holds the same parameters, as good as the undisturbed run's.

mod launch_util;

use std::fs::File;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use launch_util::{phalanx, train_ok, train_summaries, wait_for_workers, TempDir};

const DEADLINE: Duration = Duration::from_secs(240);

/// The digits MLP on 4 ranks in islands of 2, an outer sync every 20 steps (45 steps an
/// epoch), with `outer`'s mode.
fn flags(outer: &[&str]) -> Vec<String> {
    [
        "--nproc-per-node",
        "4",
        "--island-size",
        "2",
        "--sync-every",
        "20",
        "--momentum",
        "0.9",
        "--hidden",
        "128",
        "--epochs",
        "150",
    ]
    .iter()
    .chain(outer)
    .map(|s| s.to_string())
    .collect()
}

/// A job whose output goes to files the test reads while it runs; killed when dropped.
struct Job {
    child: Child,
    out: std::path::PathBuf,
    err: std::path::PathBuf,
    _dir: TempDir,
}

impl Job {
    fn start(args: &[String]) -> Job {
        let dir = TempDir::new("outer-ft");
        let (out, err) = (dir.path().join("out"), dir.path().join("err"));
        let mut cmd = phalanx();
        cmd.args(["train", "--standalone", "--json"])
            .args(["--fault-tolerance", "--max-restarts", "2"])
            .args(args)
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap())
            .stdin(Stdio::null());
        Job {
            child: cmd.spawn().expect("spawning phalanx train"),
            out,
            err,
            _dir: dir,
        }
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Waits until rank 0 reported `epochs` epochs: training is under way.
    fn wait_for_epochs(&self, epochs: usize, begin: Instant) {
        while self.stdout().matches("\"event\":\"epoch\"").count() < epochs {
            assert!(
                begin.elapsed() < DEADLINE,
                "no {epochs} epochs after {DEADLINE:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the launcher to exit: its code, stdout and stderr.
    fn wait(mut self, begin: Instant) -> (Option<i32>, String, String) {
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status.code(), self.stdout(), self.stderr());
            }
            assert!(
                begin.elapsed() < DEADLINE,
                "still running after {DEADLINE:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `rank`'s reports of a re-formed group: (members, first step after it, seconds it took).
fn regroups(stderr: &str, rank: usize) -> Vec<(String, u64, f64)> {
    let head = format!("phalanx train: rank {rank}: generation ");
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix(&head))
        .filter_map(|l| {
            let members = l
                .split("re-formed with ranks ")
                .nth(1)?
                .split(" of")
                .next()?;
            let step = l.split(", step ").nth(1)?.split(' ').next()?.parse().ok()?;
            let secs = l
                .split("completed ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()?;
            Some((members.to_string(), step, secs))
        })
        .collect()
}

/// Every rank's `outer_syncs`.
fn syncs(stdout: &str) -> Vec<u64> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "summary")
        .map(|v| v["outer_syncs"].as_u64().unwrap())
        .collect()
}

/// Kills `victims` once training is under way, and checks the drill (module docs).
fn drill(outer: &[&str], victims: &[u32], reference: f64) {
    let begin = Instant::now();
    let job = Job::start(&flags(outer));
    let procs = wait_for_workers(job.child.id() as i32, 4);
    job.wait_for_epochs(10, begin);
    for v in victims {
        let pid = procs.iter().find(|(_, r)| r == v).unwrap().0;
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let (code, stdout, stderr) = job.wait(begin);
    let what = format!("{outer:?}, killed {victims:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(code, Some(0), "{what}");
    for v in victims {
        assert!(
            stderr.contains(&format!("rank {v} (local rank {v}, pid "))
                && stderr.contains("ended with signal 9 (SIGKILL)"),
            "{what}"
        );
    }
    assert!(!stderr.contains("starting attempt"), "no restart: {what}");
    // Island 0 goes on at once: it noticed at its next outer sync (or epoch end) and formed
    // the next group within a second, without island 1 or with its replacements ready.
    for r in [0, 1] {
        let (members, step, secs) = regroups(&stderr, r)
            .first()
            .cloned()
            .unwrap_or_else(|| panic!("rank {r} never re-formed: {what}"));
        assert!(
            members == "[0, 1]" || members == "[0, 1, 2, 3]",
            "rank {r} re-formed with {members}: {what}"
        );
        // Syncs end every 5 steps under streaming in 4 fragments (every 20 under DiLoCo).
        let before = step - 1;
        assert!(
            before.is_multiple_of(5) || before.is_multiple_of(45),
            "rank {r} regrouped after step {before}, neither a sync nor an epoch's end: {what}"
        );
        assert!(secs < 2.0, "rank {r} stalled {secs} s: {what}");
    }
    // The replacements joined, and every rank ends in one group of four.
    assert!(stderr.contains("this replacement joined"), "{what}");
    for r in 0..4 {
        assert!(
            regroups(&stderr, r)
                .last()
                .is_some_and(|(m, _, _)| m == "[0, 1, 2, 3]"),
            "rank {r} did not end in a group of four: {what}"
        );
    }
    let got = train_summaries(&stdout);
    assert_eq!(got.len(), 4, "{what}");
    assert!(
        got.iter().all(|s| s.2 == got[0].2),
        "islands differ after the last sync: {what}"
    );
    let s = syncs(&stdout);
    assert!(s.iter().all(|&n| n == s[0] && n > 0), "syncs {s:?}: {what}");
    assert!(
        got[0].1 >= reference - 0.02,
        "accuracy {} against {reference} undisturbed: {what}",
        got[0].1
    );
}

#[test]
fn an_island_killed_mid_run_is_replaced_and_every_island_ends_equal() {
    let diloco = ["--outer", "diloco"];
    let args = flags(&diloco);
    let reference = train_ok(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        DEADLINE,
    );
    let want = train_summaries(&reference.stdout);
    assert_eq!(want.len(), 4, "{}", reference.stdout);
    // Both ranks of island 1: it is lost whole.
    drill(&diloco, &[2, 3], want[0].1);
    // One rank of island 1 under streaming DiLoCo (a fragment's sync often under way): the
    // other is left alone, and either joins again or is joined by the replacement first.
    drill(
        &[
            "--outer",
            "streaming-diloco",
            "--fragments",
            "4",
            "--fragment-delay",
            "2",
        ],
        &[3],
        want[0].1,
    );
}
