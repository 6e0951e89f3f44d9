//! `phalanx train --outer`: islands that train apart and meet every `--sync-every` steps
//! (Note [Outer sync], Note [Islands run]), through the real binary on 4 ranks in 2 islands:
//! the CNN at equal samples within a point of DDP, every rank ending on the same parameters,
//! and the flags that cannot work named before or as the run starts.

mod launch_util;

use std::time::Duration;

use launch_util::{phalanx, run, train_ok};

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
    // syncs) and the 4 fragments at the end.
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
        (
            &[
                "--outer",
                "streaming-diloco",
                "--sync-every",
                "20",
                "--fragments",
                "4",
                "--fragment-delay",
                "2",
            ][..],
            68,
        ),
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
        (
            &[
                "--outer",
                "diloco",
                "--sync-every",
                "5",
                "--sharding",
                "full",
            ][..],
            &["--sharding full", "--sharding none inside the islands"][..],
        ),
    ] {
        let stderr = refused(args);
        for w in words {
            assert!(stderr.contains(w), "{args:?}: {w:?} not in\n{stderr}");
        }
    }
}
