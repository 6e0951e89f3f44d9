//! The example `mnist_learner` (a burn-train Learner program whose one phalanx line is the
//! strategy) on 1 and 2 ranks under the real `phalanx launch`: both exit 0, the replicas are
//! bitwise identical, rank 0 prints the validation metrics once per epoch, and 2 ranks end
//! within a few points of 1.
//!
//! The binaries come from the target directory this test runs from: `cargo test` builds the
//! example; `target/debug/phalanx` is built by `cargo test --workspace` (phalanx-cli's binary).
//! Each run has a deadline past which the launcher is killed (its workers follow it) and the
//! test fails.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use phalanx_testing::process::{clean_env, rank_lines, run, Finished, TempDir};

/// A run takes a few seconds; the deadline allows for a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(300);

/// `target/debug`, from this test's own path (`target/debug/deps/learner_launch-…`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The launcher and the example, or `None` (said on stderr) when the launcher is not built.
fn binaries() -> Option<(PathBuf, PathBuf)> {
    let dir = target_dir();
    let phalanx = dir.join("phalanx");
    let example = dir.join("examples").join("mnist_learner");
    assert!(example.exists(), "{} is not built", example.display());
    if !phalanx.exists() {
        eprintln!(
            "skipped: {} is not built (cargo build -p phalanx-cli, or cargo test --workspace)",
            phalanx.display()
        );
        return None;
    }
    Some((phalanx, example))
}

/// What one launch printed: per rank, its digest; rank 0's validation lines.
struct Outcome {
    digests: Vec<(u32, String)>,
    accuracies: Vec<(u32, f64)>,
    finished: Finished,
}

fn launch(nproc: usize, epochs: usize, extra: &[&str]) -> Option<Outcome> {
    let (phalanx, example) = binaries()?;
    let dir = TempDir::new("learner");
    let mut cmd = Command::new(phalanx);
    clean_env(&mut cmd)
        .args([
            "launch",
            "--standalone",
            "--nproc-per-node",
            &nproc.to_string(),
            "--",
        ])
        .arg(example)
        .args(["--epochs", &epochs.to_string(), "--artifact-dir", dir.str()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let finished = run(cmd, DEADLINE);
    let lines = rank_lines(&finished.stdout);
    let digests = lines
        .iter()
        .filter_map(|(rank, line)| {
            let digest = line.split("parameter digest ").nth(1)?;
            Some((*rank, digest.trim().to_string()))
        })
        .collect();
    let accuracies = lines
        .iter()
        .filter(|(_, line)| line.starts_with("epoch ") && line.contains(" valid "))
        .map(|(rank, line)| {
            let after = line.split("Accuracy ").nth(1).expect("an accuracy");
            let value = after.split_whitespace().next().unwrap().parse().unwrap();
            (*rank, value)
        })
        .collect();
    Some(Outcome {
        digests,
        accuracies,
        finished,
    })
}

fn check(outcome: &Outcome, nproc: usize, epochs: usize) {
    let f = &outcome.finished;
    assert_eq!(
        f.code(),
        Some(0),
        "{nproc} rank(s): stdout:\n{}\nstderr:\n{}",
        f.stdout,
        f.stderr
    );
    let mut ranks: Vec<u32> = outcome.digests.iter().map(|(r, _)| *r).collect();
    ranks.sort();
    assert_eq!(ranks, (0..nproc as u32).collect::<Vec<_>>(), "{}", f.stdout);
    assert!(
        outcome
            .digests
            .iter()
            .all(|(_, d)| *d == outcome.digests[0].1),
        "replicas differ: {:?}",
        outcome.digests
    );
    assert_eq!(
        outcome.accuracies.len(),
        epochs,
        "once per epoch:\n{}",
        f.stdout
    );
    assert!(
        outcome.accuracies.iter().all(|(r, _)| *r == 0),
        "rank 0 only:\n{}",
        f.stdout
    );
}

#[test]
fn one_and_two_ranks_agree() {
    let epochs = 3;
    let Some(one) = launch(1, epochs, &[]) else {
        return;
    };
    check(&one, 1, epochs);
    let two = launch(2, epochs, &[]).unwrap();
    check(&two, 2, epochs);
    let (a1, a2) = (one.accuracies[epochs - 1].1, two.accuracies[epochs - 1].1);
    assert!(a1 > 85.0, "1 rank: {a1}%");
    assert!((a1 - a2).abs() < 5.0, "1 rank {a1}%, 2 ranks {a2}%");
}

#[test]
fn gradient_accumulation_keeps_replicas_equal() {
    let Some(two) = launch(2, 1, &["--grads-accumulation", "3"]) else {
        return;
    };
    check(&two, 2, 1);
}
