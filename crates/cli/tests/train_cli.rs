//! `phalanx train` through the real binary: the default job's accuracy, identical replicas on
//! 2 and 3 ranks, checkpoint/resume bitwise equal to an uninterrupted run, a damaged newest
//! checkpoint skipped (and every one damaged refused), metrics and plots written.

mod launch_util;

use std::time::Duration;

use launch_util::{phalanx, run, train_ok, train_summaries, Finished, TempDir};

fn train(args: &[&str]) -> Finished {
    train_ok(args, Duration::from_secs(240))
}

/// A run stopped after `max_steps`, checkpointing every `every` steps into `dir`.
fn interrupted(common: &[&str], dir: &TempDir, every: &str, max_steps: &str) -> Finished {
    let more = [
        "--checkpoint-dir",
        dir.str(),
        "--checkpoint-every",
        every,
        "--max-steps",
        max_steps,
    ];
    train(&[common, &more[..]].concat())
}

/// The `{"event":"summary",…}` objects, one per rank: (rank, accuracy, digest).
fn summaries(f: &Finished) -> Vec<(u64, f64, String)> {
    train_summaries(&f.stdout)
}

#[test]
fn default_job_reaches_95_percent_with_identical_replicas() {
    let mut cmd = phalanx();
    cmd.arg("train");
    let f = run(cmd, Duration::from_secs(240));
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    assert!(f.stdout.contains("2 rank(s)"), "{}", f.stdout);
    let acc: f64 = f
        .stdout
        .lines()
        .find_map(|l| {
            l.split_once("test accuracy ")
                .and_then(|(_, r)| r.split('%').next())
        })
        .expect("summary line")
        .parse()
        .unwrap();
    assert!(acc >= 95.0, "accuracy {acc}%\n{}", f.stdout);
}

#[test]
fn two_and_three_ranks_end_bitwise_identical() {
    for n in ["2", "3"] {
        let f = train(&["--nproc-per-node", n, "--epochs", "2", "--batch-size", "16"]);
        let s = summaries(&f);
        assert_eq!(s.len(), n.parse::<usize>().unwrap(), "{}", f.stdout);
        assert!(
            s.iter().all(|x| x.2 == s[0].2 && x.2.len() == 64),
            "digests differ on {n} ranks: {s:?}"
        );
    }
}

#[test]
fn device_buckets_give_the_host_buckets_parameters() {
    // On the CPU, `--bucket-memory device` keeps the buckets as tensors and copies them through
    // the host for the same allreduce: the parameters must equal host buckets' bit for bit.
    let args = [
        "--nproc-per-node",
        "2",
        "--epochs",
        "2",
        "--batch-size",
        "16",
    ];
    let digests = |memory: &str| {
        let f = train(&[&args[..], &["--bucket-memory", memory]].concat());
        let s = summaries(&f);
        assert_eq!(s.len(), 2, "{}", f.stdout);
        assert_eq!(s[0].2, s[1].2, "replicas differ with {memory} buckets");
        s[0].2.clone()
    };
    assert_eq!(digests("device"), digests("host"));
}

#[test]
fn resume_mid_epoch_equals_the_uninterrupted_run() {
    let (a, b) = (TempDir::new("ck-a"), TempDir::new("ck-b"));
    let common = ["--epochs", "3", "--batch-size", "16", "--seed", "3"];
    let full = summaries(&train(
        &[&common[..], &["--checkpoint-dir", a.str()]].concat(),
    ));
    // Stop at step 100 (mid-epoch 3: 45 steps per epoch), checkpoints every 7 steps: the
    // newest is at step 98, in the middle of an epoch.
    interrupted(&common, &b, "7", "100");
    let newest = std::fs::read_dir(b.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().into_string().unwrap())
        .max()
        .unwrap();
    assert!(newest.starts_with("step-000000000098"), "{newest}");
    let resumed_run = train(&[&common[..], &["--checkpoint-dir", b.str(), "--resume"]].concat());
    let resumed = summaries(&resumed_run);
    assert_eq!(full.len(), 2);
    assert_eq!(
        resumed[0].2, full[0].2,
        "resumed digest differs from the uninterrupted run"
    );
    assert_eq!(resumed[1].2, full[1].2);
    // At another world size it resumes too (not bitwise: the reduction order changes).
    let three = summaries(&train(&[
        "--epochs",
        "4",
        "--batch-size",
        "16",
        "--seed",
        "3",
        "--checkpoint-dir",
        b.str(),
        "--resume",
        "--nproc-per-node",
        "3",
    ]));
    assert_eq!(three.len(), 3);
    assert!(three.iter().all(|x| x.2 == three[0].2));
}

#[test]
fn resume_with_momentum_equals_the_uninterrupted_run() {
    // The momentum buffers are in the checkpoint: a resumed run continues them exactly.
    let (a, b) = (TempDir::new("ck-ma"), TempDir::new("ck-mb"));
    let common = [
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--seed",
        "5",
        "--momentum",
        "0.9",
    ];
    let full = summaries(&train(
        &[&common[..], &["--checkpoint-dir", a.str()]].concat(),
    ));
    // 45 steps per epoch: stop at step 60, the newest checkpoint at step 56, mid-epoch 2.
    interrupted(&common, &b, "8", "60");
    let resumed = train(&[&common[..], &["--checkpoint-dir", b.str(), "--resume"]].concat());
    assert!(
        !resumed.stderr.contains("restart from zero"),
        "{}",
        resumed.stderr
    );
    let resumed = summaries(&resumed);
    assert_eq!((full.len(), resumed.len()), (2, 2));
    assert_eq!(
        resumed[0].2, full[0].2,
        "resumed digest differs from the uninterrupted run with momentum"
    );
    assert_eq!(resumed[1].2, full[1].2);
}

/// The committed checkpoints' tensor files in `dir`, oldest first.
fn tensor_files(dir: &TempDir) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    v.sort();
    v
}

fn resume(dir: &TempDir, epochs: &str) -> Finished {
    let mut cmd = phalanx();
    cmd.args([
        "train",
        "--standalone",
        "--epochs",
        epochs,
        "--batch-size",
        "32",
        "--resume",
        "--checkpoint-dir",
        dir.str(),
    ]);
    run(cmd, Duration::from_secs(180))
}

#[test]
fn a_damaged_newest_checkpoint_is_skipped_and_all_damaged_is_refused() {
    let d = TempDir::new("ck-torn");
    train(&[
        "--epochs",
        "2",
        "--batch-size",
        "32",
        "--checkpoint-dir",
        d.str(),
    ]);
    let files = tensor_files(&d);
    assert!(files.len() >= 2, "{files:?}");
    let newest = files.last().unwrap().clone();
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() / 2]).unwrap();
    // Resumes from the older checkpoint (epoch 1), naming the damaged one and what fails.
    let f = resume(&d, "3");
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    let name = newest.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        f.stderr.contains("skipping a damaged checkpoint")
            && f.stderr.contains(&name)
            && f.stderr.contains("checksum mismatch"),
        "{}",
        f.stderr
    );
    assert!(
        f.stdout.contains("resumed from step") && f.stdout.contains("(epoch 2,"),
        "{}",
        f.stdout
    );
    // Every checkpoint damaged: a clear error, and nothing is overwritten.
    for p in tensor_files(&d) {
        std::fs::write(&p, b"damaged").unwrap();
    }
    let before: Vec<_> = tensor_files(&d)
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let f = resume(&d, "4");
    assert_ne!(f.code(), Some(0), "{}", f.stdout);
    let all = format!("{}{}", f.stdout, f.stderr);
    assert!(all.contains("no checkpoint verifies"), "{all}");
    let after: Vec<_> = tensor_files(&d)
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert_eq!(before, after, "a refused resume wrote no checkpoint");
}

#[test]
fn out_dir_gets_metrics_and_plots() {
    let d = TempDir::new("train-out");
    train(&["--epochs", "2", "--batch-size", "32", "--out", d.str()]);
    let jsonl = std::fs::read_to_string(d.path().join("metrics.jsonl")).unwrap();
    assert_eq!(jsonl.lines().count(), 2);
    assert!(jsonl.contains("\"test_accuracy\""));
    assert_eq!(
        &std::fs::read(d.path().join("curves.png")).unwrap()[..4],
        b"\x89PNG"
    );
    assert!(d.path().join("curves.svg").exists());
}

#[test]
fn bad_flags_are_named() {
    let mut cmd = phalanx();
    cmd.args([
        "train",
        "--dataset",
        "cifar10",
        "--nproc-per-node",
        "1",
        "--standalone",
    ]);
    let f = run(cmd, Duration::from_secs(60));
    assert_ne!(f.code(), Some(0));
    assert!(f.stderr.contains("cifar10"), "{}", f.stderr);
    let mut cmd = phalanx();
    cmd.args(["train", "--resume"]);
    let f = run(cmd, Duration::from_secs(60));
    assert_ne!(f.code(), Some(0));
    assert!(f.stderr.contains("--checkpoint-dir"), "{}", f.stderr);
    let mut cmd = phalanx();
    cmd.args(["train", "--bucket-memory", "gpu"]);
    let f = run(cmd, Duration::from_secs(60));
    assert_ne!(f.code(), Some(0));
    assert!(
        f.stderr.contains("--bucket-memory") && f.stderr.contains("auto, host or device"),
        "{}",
        f.stderr
    );
}

#[test]
fn bench_train_reports_both_world_sizes_and_efficiency() {
    let mut cmd = phalanx();
    cmd.args([
        "bench", "train", "--steps", "5", "--warmup", "1", "--hidden", "32", "--json",
    ]);
    let f = run(cmd, Duration::from_secs(120));
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    let rows: Vec<&str> = f
        .stdout
        .lines()
        .filter(|l| l.starts_with("{\"bench\":\"train\""))
        .collect();
    assert_eq!(rows.len(), 2, "{}", f.stdout);
    assert!(
        rows[0].contains("\"world\":1") && rows[1].contains("\"world\":2"),
        "{rows:?}"
    );
    assert!(rows
        .iter()
        .all(|r| r.contains("\"scaling_efficiency\":") && r.contains("\"samples_per_s\":")));
}
