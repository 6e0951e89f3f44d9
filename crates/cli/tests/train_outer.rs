//! `phalanx train --outer`: islands that train apart and meet every `--sync-every` steps
//! (Note [Outer sync], Note [Islands run]), through the real binary on 4 ranks in 2 islands:
//! the CNN at equal samples within a point of DDP, every rank ending on the same parameters,
//! and the flags that cannot work named before or as the run starts.
//!
//! Under `--fault-tolerance`, islands that leave and join (Note [Islands that leave and join]
//! in phalanx-ddp, Note [Whole blocks] in phalanx-pg), drilled through the real launcher: an
//! island SIGKILLed mid-run (both its ranks, or one, which leaves the other alone): the other
//! island goes on from its next outer sync or epoch end, within a second; the replacements
//! join at an outer boundary and take the global parameters and outer state from the
//! surviving island; after the last sync every rank of every island holds the same
//! parameters, as good as the undisturbed run's.

mod launch_util;

use std::fs::File;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use launch_util::{phalanx, run, train_ok, train_summaries, wait_for_workers, TempDir};

/// Streaming DiLoCo at H 20 in 4 fragments, each sync overlapping 2 steps.
const STREAMING: [&str; 8] = [
    "--outer",
    "streaming-diloco",
    "--sync-every",
    "20",
    "--fragments",
    "4",
    "--fragment-delay",
    "2",
];

/// DiLoCo at H 20 with FSDP inside its islands.
const DILOCO_FSDP: [&str; 6] = [
    "--outer",
    "diloco",
    "--sync-every",
    "20",
    "--sharding",
    "full",
];

/// Rank 0's `--json` summary.
fn summary(stdout: &str) -> serde_json::Value {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "summary" && v["rank"] == 0)
        .unwrap_or_else(|| panic!("no summary of rank 0 in\n{stdout}"))
}

/// Every rank's parameter digest.
fn digests(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "summary")
        .map(|v| v["param_digest"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_cnn_in_two_islands_ends_equal_everywhere_and_within_a_point_of_ddp() {
    // 10 epochs of 32 steps at 4 ranks: DiLoCo at H 20 syncs 16 times, the last on the last
    // step; local SGD at H 100 in fp4 3 times and once more at the end; streaming DiLoCo at
    // H 20 in 4 fragments, each sync overlapping 2 steps, one fragment every 5 steps (64
    // syncs) and the 4 fragments at the end (each keeps half the islands' progress at its
    // sync, so even the one synced on the last step is apart).
    let common = [
        "--nproc-per-node",
        "4",
        "--model",
        "cnn",
        "--dataset",
        "mnist5k",
        "--epochs",
        "10",
        "--batch-size",
        "32",
        "--optimizer",
        "adam",
        "--lr",
        "0.001",
    ];
    let deadline = Duration::from_secs(300);
    let ddp = train_ok(&common, deadline);
    let ddp_accuracy = summary(&ddp.stdout)["test_accuracy"].as_f64().unwrap();
    for (flags, syncs) in [
        (&["--outer", "diloco", "--sync-every", "20"][..], 16),
        (
            &[
                "--outer",
                "local-sgd",
                "--sync-every",
                "100",
                "--outer-dtype",
                "fp4",
            ][..],
            4,
        ),
        (&STREAMING[..], 68),
        // FSDP inside the islands: each rank's shard takes its pieces of the global parameters.
        (&DILOCO_FSDP[..], 16),
    ] {
        let args: Vec<&str> = common
            .iter()
            .chain(flags)
            .chain(&["--island-size", "2"])
            .copied()
            .collect();
        let f = train_ok(&args, deadline);
        let s = summary(&f.stdout);
        let d = digests(&f.stdout);
        assert_eq!(d.len(), 4, "{}", f.stdout);
        assert!(
            d.iter().all(|x| *x == d[0]),
            "{flags:?}: islands differ: {d:?}"
        );
        assert_eq!(s["outer_syncs"], syncs, "{flags:?}: {s}");
        let accuracy = s["test_accuracy"].as_f64().unwrap();
        assert!(
            (accuracy - ddp_accuracy).abs() <= 0.01,
            "{flags:?}: accuracy {accuracy} against DDP's {ddp_accuracy}"
        );
        // What crossed between the islands: 1/2 of the model per rank per sync, in fp4 about
        // 7x less than in f32.
        assert!(s["outer_bytes_across"].as_u64().unwrap() > 0, "{s}");
    }
}

#[test]
fn flags_that_cannot_work_are_named() {
    let refused = |args: &[&str]| {
        let mut cmd = phalanx();
        cmd.arg("train").args(["--standalone"]).args(args);
        let f = run(cmd, Duration::from_secs(120));
        assert_ne!(f.code(), Some(0), "phalanx train {args:?} succeeded");
        f.stderr
    };
    let one_island_of_shards = [&DILOCO_FSDP[..], &["--fault-tolerance"]].concat();
    for (args, words) in [
        (
            &["--outer", "diloco", "--sync-every", "0"][..],
            &["--sync-every", "never meet"][..],
        ),
        (&["--outer", "diloco"][..], &["needs --sync-every"][..]),
        (&["--sync-every", "20"][..], &["needs --outer"][..]),
        (
            &[
                "--outer",
                "local-sgd",
                "--sync-every",
                "5",
                "--outer-lr",
                "0.5",
            ][..],
            &["--outer-lr applies to --outer diloco"][..],
        ),
        (
            &["--outer", "streaming-diloco", "--sync-every", "10"][..],
            &["--sync-every 10 is not a multiple of --fragments 4"][..],
        ),
        (
            &[
                "--outer",
                "streaming-diloco",
                "--sync-every",
                "20",
                "--fragment-delay",
                "5",
            ][..],
            &["--fragment-delay 5", "H/F = 20/4 = 5", "at most 4"][..],
        ),
        (
            &[
                "--outer",
                "diloco",
                "--sync-every",
                "20",
                "--fragments",
                "2",
            ][..],
            &["--fragments", "applies to --outer streaming-diloco"][..],
        ),
        (&["--fragment-alpha", "0.5"][..], &["needs --outer"][..]),
        // Under fault tolerance the islands are each other's copies of their shards: one
        // island alone has none.
        (
            &one_island_of_shards[..],
            &["--sharding full", "one island of", "--island-size below"][..],
        ),
        (
            &[
                "--outer",
                "diloco",
                "--sync-every",
                "5",
                "--outer-dtype",
                "int4",
            ][..],
            &["`int4`", "fp4"][..],
        ),
        // The world's checks, on the ranks: 3 ranks do not make islands of 2.
        (
            &[
                "--nproc-per-node",
                "3",
                "--outer",
                "diloco",
                "--sync-every",
                "5",
                "--island-size",
                "2",
            ][..],
            &["island of 2 ranks", "--island-size 1, 3"][..],
        ),
    ] {
        let stderr = refused(args);
        for w in words {
            assert!(stderr.contains(w), "{args:?}: {w:?} not in\n{stderr}");
        }
    }
}

const DRILL_DEADLINE: Duration = Duration::from_secs(240);

/// The drills' run: the digits MLP on 4 ranks in islands of 2, an outer sync every 20 steps
/// (45 steps an epoch), with `outer`'s mode.
fn drill_flags(outer: &[&str]) -> Vec<String> {
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
                begin.elapsed() < DRILL_DEADLINE,
                "no {epochs} epochs after {DRILL_DEADLINE:?}:\n{}",
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
                begin.elapsed() < DRILL_DEADLINE,
                "still running after {DRILL_DEADLINE:?}:\n{}",
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
    let job = Job::start(&drill_flags(outer));
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
    let args = drill_flags(&diloco);
    let reference = train_ok(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        DRILL_DEADLINE,
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
    // FSDP inside the islands: island 1 loses one rank and half its pieces with it, and takes
    // island 0's state, joined from island 0's pieces (Note [Islands of shards that leave and
    // join] in phalanx-train).
    drill(
        &["--outer", "diloco", "--sharding", "full"],
        &[3],
        want[0].1,
    );
}

/// The arguments as `&str`.
fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Every file of the checkpoint at `step` in `dir` (its record, its tensors, its rank files).
fn drop_checkpoint(dir: &std::path::Path, step: u64) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(&format!("step-{step:012}.")))
        {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
}

#[test]
fn a_run_in_islands_resumes_bitwise_from_its_checkpoint() {
    // Checkpoints at steps 83, 166 and 249 and the epochs' ends (45 steps each, 270 in all):
    // under streaming DiLoCo at H 20 in 4 fragments with a delay of 2, the sync of step 250
    // is under way at step 249. Resumed there, each island goes on from its own model,
    // optimizer and chunk of the outer state, and the run ends bitwise where the
    // uninterrupted one ends. DiLoCo runs FSDP inside its islands: each island's pieces are
    // gathered into its ranks' files, and cut again at the resume.
    for outer in [&DILOCO_FSDP[..], &STREAMING[..]] {
        let whole = TempDir::new("outer-ckpt");
        let args = |dir: &TempDir| -> Vec<String> {
            [
                "--nproc-per-node",
                "4",
                "--island-size",
                "2",
                "--momentum",
                "0.9",
                "--hidden",
                "64",
                "--epochs",
                "6",
                "--checkpoint-every",
                "83",
                "--checkpoint-dir",
                dir.str(),
            ]
            .iter()
            .chain(outer)
            .map(|s| s.to_string())
            .collect()
        };
        let a = train_ok(&strs(&args(&whole)), Duration::from_secs(120));
        let want = train_summaries(&a.stdout);
        assert_eq!(want.len(), 4, "{}", a.stdout);
        assert!(
            whole
                .path()
                .join("step-000000000249.island-rank-00003.safetensors")
                .exists(),
            "every rank writes its island file"
        );
        // The same directory without the last checkpoint: the newest is step 249's.
        let cut_copy = |name: &str| {
            let cut = TempDir::new(name);
            for e in std::fs::read_dir(whole.path()).unwrap().flatten() {
                std::fs::copy(e.path(), cut.path().join(e.file_name())).unwrap();
            }
            drop_checkpoint(cut.path(), 270);
            cut
        };
        let cut = cut_copy("outer-ckpt-cut");
        let mut resume = args(&cut);
        resume.push("--resume".into());
        let b = train_ok(&strs(&resume), Duration::from_secs(120));
        let what = format!("{outer:?}\n{}\n{}", b.stdout, b.stderr);
        assert_eq!(
            b.stdout.matches("\"event\":\"epoch\"").count(),
            1,
            "resumed in the last epoch: {what}"
        );
        let got = train_summaries(&b.stdout);
        assert_eq!(got.len(), 4, "{what}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(
                g.2, w.2,
                "rank {}: not the uninterrupted run's: {what}",
                g.0
            );
        }
        assert_eq!(syncs(&b.stdout), syncs(&a.stdout), "{what}");
        // The resume with `flag` set to `value` instead: refused, its sentence.
        let refused_with = |flag: &str, value: &str| {
            let mut other = resume.clone();
            let at = other.iter().position(|a| a == flag).unwrap() + 1;
            other[at] = value.into();
            let mut cmd = phalanx();
            cmd.args(["train", "--standalone", "--json"]).args(&other);
            let f = run(cmd, Duration::from_secs(120));
            assert_ne!(f.code(), Some(0), "{flag} {value}: {}", f.stdout);
            f.stderr
        };
        // Another layout (Note [A resume at another layout] in phalanx-ddp): every island
        // from island 0's state, the chunks of the outer state cut again, and under streaming
        // DiLoCo the sync under way at step 249 with island 0's pseudo-gradient. Not bitwise
        // the uninterrupted run, but its islands end equal and as accurate.
        let with = |flag: &str, value: &str, args: &mut Vec<String>| {
            let at = args.iter().position(|a| a == flag).unwrap() + 1;
            args[at] = value.into();
        };
        for (nproc, size, said) in [
            (
                "4",
                "1",
                "2 islands of 2 ranks (world 4) -> 4 of 1 (world 4)",
            ),
            ("2", "2", "-> 1 of 2 (world 2)"),
        ] {
            let fresh = cut_copy("outer-ckpt-relaid");
            let mut other = resume.clone();
            with("--checkpoint-dir", fresh.str(), &mut other);
            with("--nproc-per-node", nproc, &mut other);
            with("--island-size", size, &mut other);
            let c = train_ok(&strs(&other), Duration::from_secs(120));
            let what = format!(
                "{outer:?}, {nproc} ranks, islands of {size}:\n{}\n{}",
                c.stdout, c.stderr
            );
            assert!(
                c.stderr.contains("at another layout") && c.stderr.contains(said),
                "{what}"
            );
            assert_eq!(
                c.stderr
                    .contains("that was under way with island 0's pseudo-gradient"),
                outer[1] == "streaming-diloco",
                "{what}"
            );
            let got = train_summaries(&c.stdout);
            assert_eq!(got.len(), nproc.parse::<usize>().unwrap(), "{what}");
            assert!(
                got.iter().all(|g| g.2 == got[0].2),
                "islands differ: {what}"
            );
            assert!(
                got[0].1 >= want[0].1 - 0.02,
                "accuracy {} against {}: {what}",
                got[0].1,
                want[0].1
            );
        }
        // Another schedule cannot go on from these: said, naming both.
        let e = refused_with("--sync-every", "40");
        assert!(
            e.contains("--sync-every 20")
                && e.contains("--sync-every 40")
                && e.contains("resume with the flags that wrote it"),
            "{e}"
        );
    }
}
