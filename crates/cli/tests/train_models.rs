//! `phalanx train --model cnn|transformer`, `--optimizer adam|adamw`, schedules, `--freeze`
//! through the real binary on 2 ranks: replicas (parameters and BatchNorm buffers) identical,
//! Adam resume bitwise, frozen parameters untouched, bad input named.

mod launch_util;

use std::time::Duration;

use launch_util::{phalanx, run, train_ok, train_summaries, Finished, TempDir};
use phalanx_checkpoint::{self as checkpoint, NamedTensor};

fn train(args: &[&str]) -> Finished {
    train_ok(args, Duration::from_secs(300))
}

fn refused(args: &[&str]) -> String {
    let mut cmd = phalanx();
    cmd.arg("train").args(["--standalone"]).args(args);
    let f = run(cmd, Duration::from_secs(120));
    assert_ne!(f.code(), Some(0), "phalanx train {args:?} succeeded");
    f.stderr
}

#[test]
fn cnn_trains_on_two_ranks_with_identical_parameters_and_buffers() {
    let f = train(&[
        "--model",
        "cnn",
        "--dataset",
        "mnist5k",
        "--epochs",
        "1",
        "--batch-size",
        "32",
        "--optimizer",
        "adam",
        "--lr",
        "0.001",
    ]);
    let s = train_summaries(&f.stdout);
    assert_eq!(s.len(), 2, "{}", f.stdout);
    // The digest covers every float tensor, the running statistics included.
    assert_eq!(s[0].2, s[1].2, "replicas differ");
    assert!(s[0].1 > 0.85, "cnn after one epoch: accuracy {}", s[0].1);
}

#[test]
fn cnn_replicas_with_batchnorm_stay_identical_on_three_ranks() {
    let f = train(&[
        "--nproc-per-node",
        "3",
        "--model",
        "cnn",
        "--dataset",
        "mnist5k",
        "--epochs",
        "1",
        "--max-steps",
        "15",
        "--batch-size",
        "16",
        "--optimizer",
        "sgd",
        "--momentum",
        "0.9",
        "--lr",
        "0.05",
    ]);
    let s = train_summaries(&f.stdout);
    assert_eq!(s.len(), 3, "{}", f.stdout);
    assert!(s.iter().all(|r| r.2 == s[0].2), "replicas differ: {s:?}");
}

/// Note [Step on the compute pool] and the patched kernels' fixed reduction order
/// (vendor/burn-flex/PHALANX.md): a rank computing on one thread ends with the bits of a rank
/// computing on two, for both models (convolution, BatchNorm, max-pool, dropout, attention).
#[test]
fn one_compute_thread_trains_the_bits_of_two() {
    for model in ["cnn", "transformer"] {
        let digests: Vec<String> = ["1", "2"]
            .into_iter()
            .map(|threads| {
                let mut cmd = phalanx();
                cmd.env("RAYON_NUM_THREADS", threads)
                    .arg("train")
                    .args(["--standalone", "--json", "--nproc-per-node", "2"])
                    .args(["--model", model, "--dataset", "mnist5k", "--epochs", "1"])
                    .args(["--max-steps", "12", "--batch-size", "16"])
                    .args(["--optimizer", "adam", "--lr", "0.001"]);
                let f = run(cmd, Duration::from_secs(300));
                assert_eq!(
                    f.code(),
                    Some(0),
                    "{model} on {threads} thread(s): {}",
                    f.stderr
                );
                let s = train_summaries(&f.stdout);
                assert_eq!(s.len(), 2, "{}", f.stdout);
                assert_eq!(
                    s[0].2, s[1].2,
                    "{model} on {threads} thread(s): replicas differ"
                );
                s[0].2.clone()
            })
            .collect();
        assert_eq!(
            digests[0], digests[1],
            "{model}: 1 thread against 2 threads"
        );
    }
}

#[test]
fn transformer_trains_with_adamw_cosine_and_clipping() {
    let f = train(&[
        "--model",
        "transformer",
        "--dataset",
        "mnist5k",
        "--epochs",
        "1",
        "--max-steps",
        "30",
        "--batch-size",
        "32",
        "--optimizer",
        "adamw",
        "--lr",
        "0.001",
        "--lr-schedule",
        "cosine",
        "--warmup-steps",
        "5",
        "--grad-clip",
        "1.0",
    ]);
    let s = train_summaries(&f.stdout);
    assert_eq!(s.len(), 2, "{}", f.stdout);
    assert_eq!(s[0].2, s[1].2, "replicas differ");
}

#[test]
fn adam_resume_equals_the_uninterrupted_run() {
    // Adam's moments and step counts are in the checkpoint, and the schedule follows the step.
    let (a, b) = (TempDir::new("ck-adam-a"), TempDir::new("ck-adam-b"));
    let common = [
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--seed",
        "3",
        "--optimizer",
        "adam",
        "--lr",
        "0.003",
        "--lr-schedule",
        "cosine",
        "--warmup-steps",
        "10",
    ];
    let full = train(&[&common[..], &["--checkpoint-dir", a.str()]].concat());
    let full = train_summaries(&full.stdout);
    // 45 steps per epoch: stop at step 60, the newest checkpoint at step 56, mid-epoch 2.
    let more = [
        "--checkpoint-dir",
        b.str(),
        "--checkpoint-every",
        "8",
        "--max-steps",
        "60",
    ];
    train(&[&common[..], &more[..]].concat());
    let resumed = train(&[&common[..], &["--checkpoint-dir", b.str(), "--resume"]].concat());
    assert!(
        !resumed.stderr.contains("restarts from zero"),
        "{}",
        resumed.stderr
    );
    let resumed = train_summaries(&resumed.stdout);
    assert_eq!((full.len(), resumed.len()), (2, 2));
    assert_eq!(
        resumed[0].2, full[0].2,
        "resumed digest differs from the uninterrupted Adam run"
    );
}

fn tensor<'a>(tensors: &'a [NamedTensor], name: &str) -> &'a NamedTensor {
    tensors
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no {name} in the checkpoint"))
}

#[test]
fn frozen_parameters_stay_bitwise_unchanged_under_momentum_and_weight_decay() {
    let (early, late) = (TempDir::new("ck-freeze-1"), TempDir::new("ck-freeze-2"));
    let common = [
        "--depth",
        "2",
        "--freeze",
        "layers.0",
        "--momentum",
        "0.9",
        "--weight-decay",
        "0.01",
        "--lr",
        "0.05",
    ];
    let after_one = [
        "--checkpoint-dir",
        early.str(),
        "--checkpoint-every",
        "1",
        "--max-steps",
        "1",
        "--epochs",
        "1",
    ];
    train(&[&common[..], &after_one[..]].concat());
    let after_two_epochs = ["--checkpoint-dir", late.str(), "--epochs", "2"];
    train(&[&common[..], &after_two_epochs[..]].concat());
    let a = checkpoint::load_latest(early.path()).unwrap().unwrap();
    let b = checkpoint::load_latest(late.path()).unwrap().unwrap();
    for name in ["layers.0.weight", "layers.0.bias"] {
        assert!(
            tensor(&a.tensors, name).data == tensor(&b.tensors, name).data,
            "frozen {name} moved"
        );
    }
    for name in ["layers.1.weight", "layers.2.weight"] {
        assert!(
            tensor(&a.tensors, name).data != tensor(&b.tensors, name).data,
            "trainable {name} did not move"
        );
    }
}

#[test]
fn bad_models_optimizers_and_freeze_patterns_are_named() {
    let err = refused(&["--model", "resnet"]);
    assert!(
        err.contains("resnet") && err.contains("mlp, cnn or transformer"),
        "{err}"
    );
    let err = refused(&["--optimizer", "lamb"]);
    assert!(
        err.contains("lamb") && err.contains("sgd, adam or adamw"),
        "{err}"
    );
    let err = refused(&["--lr-schedule", "linear"]);
    assert!(err.contains("linear") && err.contains("cosine"), "{err}");
    let err = refused(&["--grad-clip", "0"]);
    assert!(err.contains("--grad-clip"), "{err}");
    let err = refused(&[
        "--nproc-per-node",
        "1",
        "--freeze",
        "conv9",
        "--epochs",
        "1",
    ]);
    assert!(
        err.contains("\"conv9\" matches no parameter") && err.contains("layers.0.weight"),
        "{err}"
    );
    let err = refused(&["--nproc-per-node", "1", "--model", "cnn", "--epochs", "1"]);
    assert!(
        err.contains("--model cnn") && err.contains("mnist5k"),
        "{err}"
    );
}

#[test]
fn resuming_another_model_or_optimizer_names_both() {
    let dir = TempDir::new("ck-other");
    train(&[
        "--nproc-per-node",
        "1",
        "--epochs",
        "1",
        "--max-steps",
        "3",
        "--checkpoint-every",
        "1",
        "--checkpoint-dir",
        dir.str(),
    ]);
    let resume = [
        "--nproc-per-node",
        "1",
        "--epochs",
        "2",
        "--resume",
        "--checkpoint-dir",
        dir.str(),
    ];
    let err = refused(&[&resume[..], &["--optimizer", "adam"]].concat());
    assert!(
        err.contains("optimizer=sgd") && err.contains("optimizer=adam"),
        "{err}"
    );
    let err = refused(&[&resume[..], &["--model", "cnn", "--dataset", "mnist5k"]].concat());
    assert!(
        err.contains("model=mlp") && err.contains("model=cnn"),
        "{err}"
    );
}

#[test]
fn bench_train_measures_the_model_asked_for() {
    let mut cmd = phalanx();
    cmd.args([
        "bench",
        "train",
        "--model",
        "cnn",
        "--optimizer",
        "adam",
        "--batch-size",
        "8",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--json",
    ]);
    let f = run(cmd, Duration::from_secs(300));
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    let rows: Vec<&str> = f
        .stdout
        .lines()
        .filter(|l| l.contains("\"bench\""))
        .collect();
    assert_eq!(rows.len(), 2, "{}", f.stdout);
    for row in rows {
        assert!(
            row.contains("\"model\":\"cnn\"") && row.contains("\"optimizer\":\"adam\""),
            "{row}"
        );
    }
}

#[test]
fn json_output_is_plain_json_lines() {
    // `phalanx train --json | jq .`: the launcher adds no `[rank N]: ` prefix to them.
    let f = train(&["--epochs", "1", "--max-steps", "5"]);
    let lines: Vec<&str> = f.stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 2, "{}", f.stdout);
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"));
        assert!(v.get("event").is_some(), "{line}");
    }
    // And as the user reads it: every line through Python's json module.
    let py = "import json,sys; [json.loads(l) for l in sys.stdin if l.strip()]";
    match std::process::Command::new("python3")
        .args(["-c", py])
        .stdin(std::process::Stdio::piped())
        .spawn()
    {
        Ok(mut child) => {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("piped stdin");
            stdin
                .write_all(f.stdout.as_bytes())
                .expect("feeding python3");
            drop(stdin);
            let status = child.wait().expect("python3 runs");
            assert!(status.success(), "python3's json rejects:\n{}", f.stdout);
        }
        Err(e) => eprintln!("note: python3 not found ({e}); checked with serde_json only"),
    }
}
