//! `phalanx train --model cnn|transformer|gpt`, `--optimizer adam|adamw`, schedules, `--freeze`
//! through the real binary on 2 ranks: replicas (parameters and BatchNorm buffers) identical,
//! Adam resume bitwise, frozen parameters untouched, the language model's loss falling and its
//! validation figures reported, bad input named.

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
        err.contains("resnet") && err.contains("mlp, cnn, transformer or gpt"),
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
    // The language model's shape and data.
    let err = refused(&["--nproc-per-node", "1", "--model", "gpt", "--heads", "3"]);
    assert!(
        err.contains("--heads 3 does not divide --hidden 128"),
        "{err}"
    );
    let err = refused(&["--model", "mlp", "--seq-len", "32"]);
    assert!(
        err.contains("--seq-len") && err.contains("applies to --model gpt, not --model mlp"),
        "{err}"
    );
    let gpt_on_images = [
        "--nproc-per-node",
        "1",
        "--model",
        "gpt",
        "--dataset",
        "mnist5k",
    ];
    let err = refused(&gpt_on_images);
    assert!(
        err.contains("unknown text corpus \"mnist5k\"") && err.contains("shakespeare"),
        "{err}"
    );
    let err = refused(&["--nproc-per-node", "1", "--dataset", "shakespeare"]);
    assert!(
        err.contains("shakespeare is a text corpus") && err.contains("--model gpt"),
        "{err}"
    );
    let err = refused(&["--model", "gpt", "--dropout", "1.5"]);
    assert!(err.contains("--dropout 1.5"), "{err}");
}

/// The fields of each `--json` object with `"event": event`.
fn json_events(stdout: &str, event: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == event)
        .collect()
}

/// The GPT on the vendored Shakespeare, 2 ranks: the loss falls from ln 256 (5.55, a uniform
/// guess among bytes), the validation loss and perplexity are in the summary, and the
/// replicas end bitwise equal, under DDP and under every sharding mode alike.
#[test]
fn gpt_learns_shakespeare_with_identical_replicas_under_ddp_and_sharding() {
    let mut digests = Vec::new();
    for sharding in ["none", "full"] {
        let f = train(&[
            "--model",
            "gpt",
            "--max-steps",
            "20",
            "--sharding",
            sharding,
        ]);
        let s = json_events(&f.stdout, "summary");
        assert_eq!(s.len(), 2, "{}", f.stdout);
        for r in &s {
            let (train, val) = (r["train_loss"].as_f64(), r["test_loss"].as_f64());
            let (train, val) = (train.expect("train_loss"), val.expect("test_loss"));
            assert!(train < 4.6 && val < 4.0, "after 20 steps: {r}");
            let ppl = r["perplexity"].as_f64().expect("perplexity");
            assert!((ppl - val.exp()).abs() < 1e-9 * ppl, "{r}");
            assert_eq!(r["param_digest"], s[0]["param_digest"], "replicas differ");
            assert_eq!(r["train_loss"], s[0]["train_loss"], "ranks report the mean");
        }
        digests.push(s[0]["param_digest"].clone());
    }
    assert_eq!(digests[0], digests[1], "--sharding full differs from DDP");
}

/// The summary objects of a GPT run of `args` (2 ranks unless `--nproc-per-node` says), with
/// every rank's digest equal.
fn gpt_run(args: &[&str]) -> Vec<serde_json::Value> {
    gpt_run_for("30", args)
}

/// [`gpt_run`] for `steps` steps.
fn gpt_run_for(steps: &str, args: &[&str]) -> Vec<serde_json::Value> {
    // A validation split of 0.2% (64 windows): evaluating the default 1% took 2 of a run's 3
    // seconds, and every comparison here is between runs of the same split.
    let mut all = vec![
        "--model",
        "gpt",
        "--max-steps",
        steps,
        "--test-fraction",
        "0.002",
    ];
    all.extend_from_slice(args);
    let f = train(&all);
    let s = json_events(&f.stdout, "summary");
    assert!(!s.is_empty(), "{}", f.stdout);
    assert!(
        s.iter().all(|r| r["param_digest"] == s[0]["param_digest"]),
        "ranks end with different models: {s:?}"
    );
    s
}

fn relative(a: &serde_json::Value, b: &serde_json::Value, field: &str) -> f64 {
    let (a, b) = (a[field].as_f64().unwrap(), b[field].as_f64().unwrap());
    (a - b).abs() / b.abs()
}

/// Tensor parallelism (Megatron's layout) against the same batches on fewer ranks: `--tp 2`
/// on 2 ranks (one data-parallel rank) against 1 rank, and `--tp 2` on 4 ranks (2 × 2)
/// against DDP on 2, dropout on (its masks are drawn as one rank draws them: Note [Dropout
/// under tensor parallelism]). The losses agree to float rounding (the row-parallel sums add
/// the ranks' partial products in another order; 2e-9 relative measured), and the whole
/// model's digest is equal on every rank of a run. `--tp 2 --sequence-parallel` agrees with
/// one rank too (its dropout masks are the whole stream's, sliced: Note [Sequence parallelism
/// in the GPT]; 3e-8 relative from `--tp 2` measured). On the mesh, `--sharding full` runs on
/// the data-parallel groups and ends bitwise where DDP there does.
#[test]
fn gpt_tensor_parallel_trains_as_fewer_ranks_do() {
    let one = gpt_run(&["--nproc-per-node", "1"]);
    let tp = gpt_run(&["--nproc-per-node", "2", "--tp", "2"]);
    assert_eq!(tp.len(), 2);
    assert_eq!(tp[0]["world"], 2, "{tp:?}");
    let sp = gpt_run(&["--nproc-per-node", "2", "--tp", "2", "--sequence-parallel"]);
    for (run, what) in [(&tp, "--tp 2"), (&sp, "--tp 2 --sequence-parallel")] {
        for field in ["train_loss", "test_loss"] {
            let r = relative(&run[0], &one[0], field);
            assert!(
                r < 1e-5,
                "{what} {field} {} vs 1 rank {}",
                run[0][field],
                one[0][field]
            );
        }
    }
    let ddp = gpt_run(&["--nproc-per-node", "2"]);
    let mesh = gpt_run(&["--nproc-per-node", "4", "--tp", "2"]);
    assert_eq!(mesh.len(), 4);
    for field in ["train_loss", "test_loss"] {
        let r = relative(&mesh[0], &ddp[0], field);
        assert!(
            r < 1e-5,
            "--tp 2 on 4 {field} {} vs DDP on 2 {}",
            mesh[0][field],
            ddp[0][field]
        );
    }
    let full = gpt_run(&["--nproc-per-node", "4", "--tp", "2", "--sharding", "full"]);
    assert_eq!(
        full[0]["param_digest"], mesh[0]["param_digest"],
        "--tp 2 --sharding full ends elsewhere than --tp 2 under DDP"
    );
}

/// Each rank draws only the piece it keeps (Note [Deferred init] in phalanx-train), and the
/// pieces are the whole build's: with a learning rate of 0 every layout ends with the model
/// one rank builds, bitwise (a piece drawn with another seed, or in another order with Burn's
/// one generator, would not).
#[test]
fn gpt_every_layout_starts_from_the_whole_build() {
    // The helper's thin validation set: the run's step is what is compared.
    let flat = ["--optimizer", "sgd", "--lr", "0", "--depth", "4"];
    let at =
        |args: &[&str]| gpt_run_for("1", &[&flat[..], args].concat())[0]["param_digest"].clone();
    let one = at(&["--nproc-per-node", "1"]);
    for layout in [
        &["--nproc-per-node", "2", "--tp", "2"][..],
        &["--nproc-per-node", "2", "--pp", "2"],
        &["--nproc-per-node", "4", "--tp", "2", "--pp", "2"],
        &["--nproc-per-node", "2", "--sharding", "full"],
    ] {
        assert_eq!(at(layout), one, "{layout:?} starts from another model");
    }
}

/// `--freeze` under `--tp`: the frozen parameters' pieces stay frozen (a piece is a parameter
/// of its own, cut from the whole one), so `--tp 2` trains as one rank does with the same
/// parameters frozen. With `--grad-clip 0.1`, which clips every step: the norm is the whole
/// model's, summed over the pieces with a replicated tensor counted once and a frozen one not
/// at all (Note [Norm across a cut model] in phalanx-ddp).
#[test]
fn gpt_tensor_parallel_keeps_frozen_parameters_frozen() {
    let frozen = ["--freeze", "wte,blocks.0", "--grad-clip", "0.1"];
    let one = gpt_run(&[&["--nproc-per-node", "1"][..], &frozen[..]].concat());
    let tp = gpt_run(&[&["--nproc-per-node", "2", "--tp", "2"][..], &frozen[..]].concat());
    for field in ["train_loss", "test_loss"] {
        let r = relative(&tp[0], &one[0], field);
        assert!(
            r < 1e-5,
            "--tp 2 {field} {} vs 1 rank {}",
            tp[0][field],
            one[0][field]
        );
    }
}

#[test]
fn tensor_parallel_sizes_that_do_not_fit_are_named() {
    refused_saying(
        &["--nproc-per-node", "3", "--model", "gpt", "--tp", "3"],
        &["--tp 3", "--heads 4 is not a multiple of 3"],
    );
    refused_saying(
        &["--nproc-per-node", "3", "--model", "gpt", "--tp", "2"],
        &["--tp 2: the world of 3 rank(s) is not a multiple of 2"],
    );
    refused_saying(
        &["--model", "cnn", "--tp", "2"],
        &["--tp 2 splits a GPT's", "--model cnn has neither"],
    );
    refused_saying(
        &["--model", "gpt", "--sequence-parallel"],
        &["--sequence-parallel", "needs --tp 2 or more (got --tp 1)"],
    );
    refused_saying(
        &[
            "--model",
            "gpt",
            "--tp",
            "2",
            "--seq-len",
            "63",
            "--sequence-parallel",
        ],
        &["--seq-len 63 positions among the 2 ranks of --tp 2; it must be a multiple of 2"],
    );
}

/// An epoch whose last batch has fewer rows than `--pp` under interleaved 1F1B: it runs as one
/// round of one microbatch (Note [Rounds of microbatches]) instead of stopping the run, and the
/// two epochs end where one rank ends them. A verse five times over is 50 windows of 8 tokens,
/// 45 of them for training: 4 batches of 11 rows, then one of 1.
#[test]
fn interleaved_takes_a_last_batch_of_fewer_rows_than_its_stages() {
    let _busy = launch_util::one_at_a_time();
    let dir = TempDir::new("gpt_short");
    let path = dir.path().join("corpus.txt");
    let verse =
        "Shall I compare thee to a summer's day? Thou art more lovely and more temperate.\n";
    std::fs::write(&path, verse.repeat(5)).unwrap();
    let corpus = format!("text:{}", path.display());
    let run = |ranks: &[&str]| {
        let small = [
            "--model",
            "gpt",
            "--dataset",
            &corpus,
            "--seq-len",
            "8",
            "--hidden",
            "32",
            "--depth",
            "4",
            "--heads",
            "2",
            "--test-fraction",
            "0.1",
            "--batch-size",
            "11",
            "--epochs",
            "2",
            "--dropout",
            "0",
        ];
        let f = train(&[ranks, &small[..]].concat());
        json_events(&f.stdout, "summary")
    };
    let one = run(&["--nproc-per-node", "1"]);
    let pp = run(&[
        "--nproc-per-node",
        "2",
        "--pp",
        "2",
        "--pp-schedule",
        "interleaved",
    ]);
    assert_eq!(pp.len(), 2, "{pp:?}");
    for rank in &pp {
        assert_eq!(rank["epochs"], 2, "{rank}");
        assert_eq!(rank["param_digest"], pp[0]["param_digest"], "{pp:?}");
        for field in ["train_loss", "test_loss"] {
            let r = relative(rank, &one[0], field);
            assert!(r < 1e-5, "{field} {} vs {}", rank[field], one[0][field]);
        }
    }
}

/// A user's own text (`text:PATH`) for whole epochs: each epoch line carries the validation
/// loss and its perplexity, in text and in `--json`.
#[test]
fn gpt_epochs_report_validation_loss_and_perplexity_on_a_users_text() {
    let dir = TempDir::new("gpt_text");
    let path = dir.path().join("corpus.txt");
    let verse =
        "Shall I compare thee to a summer's day? Thou art more lovely and more temperate.\n";
    std::fs::write(&path, verse.repeat(300)).unwrap();
    let corpus = format!("text:{}", path.display());
    let small = [
        "--model",
        "gpt",
        "--dataset",
        &corpus,
        "--seq-len",
        "16",
        "--hidden",
        "32",
        "--depth",
        "1",
        "--heads",
        "2",
        "--test-fraction",
        "0.1",
        "--batch-size",
        "16",
        "--epochs",
        "3",
        "--lr",
        "0.003",
    ];
    let f = train(&small);
    let epochs = json_events(&f.stdout, "epoch");
    assert_eq!(epochs.len(), 3, "{}", f.stdout);
    let e = &epochs[2];
    let val = e["test_loss"].as_f64().expect("test_loss");
    assert!(val < 2.5, "three epochs of a repeated verse: {e}");
    assert!(
        (e["perplexity"].as_f64().unwrap() - val.exp()).abs() < 1e-6,
        "{e}"
    );
    // Without --json, rank 0's epoch line says the same in words.
    let mut cmd = phalanx();
    cmd.arg("train").arg("--standalone").args(small);
    let f = run(cmd, Duration::from_secs(300));
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    assert!(
        f.stdout.contains("val loss") && f.stdout.contains("perplexity"),
        "{}",
        f.stdout
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
    // And as the issue's user reads it: every line through Python's json module.
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

/// Pipeline parallelism against the same batches on one rank, dropout off (with dropout each
/// microbatch on each stage draws its own masks: Note [Pipeline run]): each schedule on 2
/// stages (interleaved with 2 chunks per rank over 4 blocks, and in one round of 3
/// microbatches), `--tp 2 --pp 2
/// --sequence-parallel` on 4 ranks (the stages send their positions only; `--tp 2 --pp 2`
/// without it is run by the checkpoint tests), and `--pp 2` on 4 ranks against DDP on 2, the
/// last three with `--grad-clip 0.1` (every step
/// clipped by the whole model's norm over the pieces), and that last one again under
/// `--sharding full`, bitwise. The losses agree within 1e-5 relative (the
/// microbatches' gradients are summed in another order: 8e-9 to 6e-7 measured), the whole
/// model's digest is equal on every rank of a run, and the summary carries the measured bubble
/// next to the schedule's.
#[test]
fn gpt_pipeline_trains_as_one_rank_does() {
    let _busy = launch_util::one_at_a_time();
    // Every rank's: the first stages take the loss from the gradients (Note [The loss rides
    // with the gradients]).
    let close = |run: &[serde_json::Value], to: &serde_json::Value, what: &str| {
        for rank in run {
            for field in ["train_loss", "test_loss"] {
                let r = relative(rank, to, field);
                assert!(r < 1e-5, "{what} {field} {} vs {}", rank[field], to[field]);
            }
        }
    };
    let one = gpt_run(&["--nproc-per-node", "1", "--dropout", "0"]);
    for schedule in ["gpipe", "1f1b"] {
        let pp = gpt_run(&[
            "--nproc-per-node",
            "2",
            "--dropout",
            "0",
            "--pp",
            "2",
            "--pp-schedule",
            schedule,
        ]);
        assert_eq!(pp.len(), 2);
        close(&pp, &one[0], schedule);
        let theory = pp[0]["pipeline_bubble_theory"].as_f64().unwrap();
        assert!((theory - 0.2).abs() < 1e-9, "{schedule}: {pp:?}");
        // The pipeline's figures are gathered from its stages: one on every rank, beside each
        // rank's own idle share (Note [The measured bubble]).
        for field in ["pipeline_bubble", "pipeline_imbalance"] {
            let measured = pp[0][field].as_f64().unwrap();
            assert!((0.0..1.0).contains(&measured), "{schedule}: {pp:?}");
            assert_eq!(pp[0][field], pp[1][field], "{schedule} {field}: {pp:?}");
        }
        for rank in &pp {
            let idle = rank["pipeline_idle"].as_f64().unwrap();
            assert!((0.0..1.0).contains(&idle), "{schedule}: {pp:?}");
        }
    }
    // Clipped at every step: the norm spans the stages and the tensor-parallel pieces.
    let deep = ["--dropout", "0", "--depth", "4", "--grad-clip", "0.1"];
    let one = gpt_run(&[&["--nproc-per-node", "1"], &deep[..]].concat());
    let interleaved = gpt_run(
        &[
            &[
                "--nproc-per-node",
                "2",
                "--pp",
                "2",
                "--pp-schedule",
                "interleaved",
            ],
            &deep[..],
        ]
        .concat(),
    );
    close(&interleaved, &one[0], "interleaved");
    // One round of 3 microbatches, more than --pp (Note [Rounds of microbatches]).
    let round = gpt_run(
        &[
            &[
                "--nproc-per-node",
                "2",
                "--pp",
                "2",
                "--pp-schedule",
                "interleaved",
                "--microbatches",
                "3",
            ],
            &deep[..],
        ]
        .concat(),
    );
    close(&round, &one[0], "interleaved in one round of 3");
    let mesh = gpt_run(
        &[
            &[
                "--nproc-per-node",
                "4",
                "--tp",
                "2",
                "--pp",
                "2",
                "--sequence-parallel",
            ],
            &deep[..],
        ]
        .concat(),
    );
    assert_eq!(mesh.len(), 4);
    assert_eq!(mesh[0]["world"], 4, "{mesh:?}");
    close(&mesh, &one[0], "--tp 2 --pp 2 --sequence-parallel");
    // Interleaved under tensor parallelism: each message sent when it is made while the
    // stages compute with the tensor-parallel all-reduces, read by the pipeline's background
    // progress (Note [Background progress] in phalanx-transport).
    let mesh = gpt_run(
        &[
            &["--nproc-per-node", "4", "--tp", "2", "--pp", "2"][..],
            &["--pp-schedule", "interleaved"],
            &deep[..],
        ]
        .concat(),
    );
    assert_eq!(mesh.len(), 4);
    close(&mesh, &one[0], "--tp 2 --pp 2 interleaved");
    let ddp = gpt_run(&[&["--nproc-per-node", "2"], &deep[..]].concat());
    let pp_dp = gpt_run(&[&["--nproc-per-node", "4", "--pp", "2"], &deep[..]].concat());
    close(&pp_dp, &ddp[0], "--pp 2 on 4 ranks against DDP on 2");
    // Fully sharded stages (Note [Microbatched units] in phalanx-ddp): each block gathered
    // once per step, its gradients summed over the microbatches in the order the unsharded
    // stage sums them and reduce-scattered once: bitwise the unsharded pipeline, clipping
    // included.
    let full = gpt_run(
        &[
            &["--nproc-per-node", "4", "--pp", "2", "--sharding", "full"],
            &deep[..],
        ]
        .concat(),
    );
    assert_eq!(
        full[0]["param_digest"], pp_dp[0]["param_digest"],
        "--pp 2 --sharding full ends elsewhere than --pp 2 under DDP"
    );
}

/// A PyTorch GPT of `--model gpt --depth 4`'s shape (vocabulary 256, d 128, 64 positions),
/// with the same module names; loads the file `argv[1]` with `strict=True`.
const TORCH_GPT: &str = r#"
import sys, torch
from torch import nn
from safetensors.torch import load_file
V, D, L, T = 256, 128, 4, 64
class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.query, self.key, self.value, self.proj = (nn.Linear(D, D) for _ in range(4))
class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(D), Attention()
        self.ln_2, self.mlp = nn.LayerNorm(D), Mlp()
class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)
Gpt().load_state_dict(load_file(sys.argv[1]), strict=True)
print("loaded strictly")
"#;

/// Checkpoints of a model cut across ranks (Note [Pieces of a cut model]): every rank writes
/// its piece (AdamW's state with it), and `--resume` at another layout ends where the
/// uninterrupted run at that layout ends. The bound is 1e-4 relative on the validation loss
/// (1e-6 to 2e-5 measured: the layouts sum in other orders). Three moves: `--tp 2 --pp 2` →
/// 1 rank, 1 rank → `--tp 2 --pp 2`, and `--tp 2 --sharding optimizer` on 4 ranks (the
/// pieces' optimizer state sharded again) → DDP on 2 and → `--tp 2 --sharding full`. `phalanx checkpoint
/// consolidate` joins the pieces into one file that a PyTorch GPT takes with `strict=True`.
/// Then a damaged piece is named with its file and its rank, and nothing is resumed.
#[test]
fn gpt_checkpoints_of_pieces_resume_at_another_layout() {
    let _busy = launch_util::one_at_a_time();
    let deep = ["--depth", "4", "--dropout", "0"];
    let mesh = ["--nproc-per-node", "4", "--tp", "2", "--pp", "2"];
    let close = |resumed: &[serde_json::Value], to: &serde_json::Value, what: &str| {
        let r = relative(&resumed[0], to, "test_loss");
        assert!(
            r < 1e-4,
            "{what}: {} vs {}",
            resumed[0]["test_loss"],
            to["test_loss"]
        );
    };
    fn with<'a>(parts: &[&[&'a str]]) -> Vec<&'a str> {
        parts.concat()
    }
    let (a, b, c) = (
        TempDir::new("ck-mesh"),
        TempDir::new("ck-one"),
        TempDir::new("ck-tp"),
    );
    fn save(dir: &TempDir) -> [&str; 4] {
        ["--checkpoint-dir", dir.str(), "--checkpoint-every", "15"]
    }
    fn resume(dir: &TempDir) -> [&str; 3] {
        ["--checkpoint-dir", dir.str(), "--resume"]
    }
    let one = gpt_run(&with(&[&deep, &["--nproc-per-node", "1"]]));
    gpt_run_for("15", &with(&[&deep, &mesh, &save(&a)]));
    let pieces: Vec<_> = std::fs::read_dir(a.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.contains(".shard-"))
        .collect();
    assert_eq!(pieces.len(), 4, "one piece per rank: {pieces:?}");
    let resumed = gpt_run(&with(&[&deep, &["--nproc-per-node", "1"], &resume(&a)]));
    close(&resumed, &one[0], "--tp 2 --pp 2 resumed on 1 rank");
    gpt_run_for("15", &with(&[&deep, &["--nproc-per-node", "1"], &save(&b)]));
    let resumed = gpt_run(&with(&[&deep, &mesh, &resume(&b)]));
    assert_eq!(resumed.len(), 4);
    close(&resumed, &one[0], "1 rank resumed under --tp 2 --pp 2");
    let ddp = gpt_run(&with(&[&deep, &["--nproc-per-node", "2"]]));
    // The pieces' optimizer state sharded again over the data-parallel group.
    let tp = ["--nproc-per-node", "4", "--tp", "2", "--sharding"];
    gpt_run_for("15", &with(&[&deep, &tp, &["optimizer"], &save(&c)]));
    let resumed = gpt_run(&with(&[&deep, &["--nproc-per-node", "2"], &resume(&c)]));
    close(
        &resumed,
        &ddp[0],
        "--tp 2 --sharding optimizer on 4 resumed under DDP on 2",
    );
    let resumed = gpt_run(&with(&[&deep, &tp, &["full"], &resume(&c)]));
    close(
        &resumed,
        &ddp[0],
        "... resumed under --tp 2 --sharding full on 4",
    );
    // One file for PyTorch, which a PyTorch GPT of the same shape takes with strict=True:
    // the embeddings' tables as nn.Embedding holds them, the norms' weight and bias.
    let out = a.path().join("consolidated.safetensors");
    let mut cmd = phalanx();
    cmd.args(["checkpoint", "consolidate", a.str(), "--out"])
        .arg(&out);
    let f = run(cmd, Duration::from_secs(60));
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    assert!(f.stdout.contains("--tp 2 --pp 2"), "{}", f.stdout);
    let test = "gpt_checkpoints_of_pieces_resume_at_another_layout";
    if let Some(py) = phalanx_testing::process::torch_python(test) {
        let mut cmd = std::process::Command::new(py);
        cmd.args(["-c", TORCH_GPT])
            .arg(&out)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let f = run(cmd, Duration::from_secs(120));
        assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
        assert!(f.stdout.contains("loaded strictly"), "{}", f.stdout);
    }
    // One piece damaged: named, with its rank, and nothing resumed.
    let piece = a
        .path()
        .join("step-000000000015.shard-00002-of-00004.safetensors");
    let mut bytes = std::fs::read(&piece).unwrap();
    let last = bytes.len() - 5;
    bytes[last] ^= 0xff;
    std::fs::write(&piece, bytes).unwrap();
    refused_saying(
        &with(&[&["--model", "gpt"], &deep, &mesh, &resume(&a)]),
        &[
            "step-000000000015.shard-00002-of-00004.safetensors",
            "the shard of rank 2 fails its checksum",
            "nothing was resumed",
        ],
    );
}

/// Ranks started with other model or layout flags (hosts launched with different command
/// lines) are named with the flag and both values, before any collective of the mesh: each
/// rank of `phalanx launch` runs `phalanx train` with a flag that depends on its `RANK`.
/// Then ranks of a cut model that resume from different directories (one not shared) are
/// named with the steps they found.
#[test]
fn ranks_started_with_other_layout_flags_are_named() {
    let bin = env!("CARGO_BIN_EXE_phalanx");
    let cases = [
        (
            "--tp $((RANK + 1))",
            "2",
            "rank 1 was started with --tp 2, rank 0 with --tp 1",
        ),
        (
            "--tp 2 --pp 2 --microbatches $((RANK / 3 + 2))",
            "4",
            "rank 3 was started with --microbatches 3, rank 0 with --microbatches 2",
        ),
        (
            "--pp 2 --hidden $((64 + 64 * (RANK % 2)))",
            "2",
            "rank 1 was started with --hidden 128, rank 0 with --hidden 64",
        ),
    ];
    for (flags, ranks, says) in cases {
        let mut cmd = phalanx();
        cmd.args(["launch", "--standalone", "--nproc-per-node", ranks])
            .args(["sh", "-c"])
            .arg(format!(
                "exec {bin} train --model gpt --depth 2 --max-steps 2 {flags}"
            ));
        let f = run(cmd, Duration::from_secs(120));
        assert_ne!(f.code(), Some(0), "{flags}: {}", f.stderr);
        assert!(f.stderr.contains(says), "{flags}: {}", f.stderr);
    }
    // Under --tp every rank reads the checkpoint: one that sees another directory (not shared)
    // is named before any step.
    let (saved, empty) = (TempDir::new("ck-shared"), TempDir::new("ck-unshared"));
    let tp = ["--model", "gpt", "--depth", "2", "--tp", "2"];
    let mut cmd = phalanx();
    cmd.args(["train", "--standalone", "--nproc-per-node", "2"])
        .args(tp)
        .args(["--max-steps", "2", "--checkpoint-every", "2"])
        .args(["--checkpoint-dir", saved.str()]);
    assert_eq!(run(cmd, Duration::from_secs(120)).code(), Some(0));
    let mut cmd = phalanx();
    cmd.args([
        "launch",
        "--standalone",
        "--nproc-per-node",
        "2",
        "sh",
        "-c",
    ])
    .arg(format!(
        "if [ $RANK = 0 ]; then d={}; else d={}; fi; exec {bin} train {} --max-steps 4 \
             --checkpoint-dir $d --resume",
        saved.str(),
        empty.str(),
        tp.join(" ")
    ));
    let f = run(cmd, Duration::from_secs(120));
    assert_ne!(f.code(), Some(0), "{}", f.stderr);
    let says = "rank 1 found no checkpoint in";
    assert!(f.stderr.contains(says), "{}", f.stderr);
    assert!(
        f.stderr.contains("rank 0 the checkpoint of step 2"),
        "{}",
        f.stderr
    );
}

/// Runs `phalanx train` with `args`, which it must refuse saying each of `says`.
fn refused_saying(args: &[&str], says: &[&str]) {
    let err = refused(args);
    for part in says {
        assert!(
            err.contains(part),
            "phalanx train {args:?} did not say {part:?}: {err}"
        );
    }
}

/// What a pipeline cannot be cut into is named with its numbers, before any step.
#[test]
fn pipeline_shapes_that_do_not_fit_are_named() {
    let gpt = |args: &[&'static str]| [&["--model", "gpt"][..], args].concat();
    refused_saying(
        &gpt(&["--nproc-per-node", "5", "--pp", "5", "--depth", "4"]),
        &["--pp 5 cuts the model into 5 stages", "it has 4 blocks"],
    );
    refused_saying(
        &["--model", "cnn", "--pp", "2"],
        &["--pp 2 cuts a GPT's blocks", "--model cnn"],
    );
    refused_saying(
        &gpt(&["--nproc-per-node", "3", "--tp", "2", "--pp", "2"]),
        &["--tp 2 --pp 2: the world of 3 rank(s) is not a multiple of 4"],
    );
    refused_saying(
        &gpt(&["--nproc-per-node", "2", "--pp", "2", "--pp-split", "2"]),
        &["--pp-split 2", "block 2 cannot start a stage"],
    );
    refused_saying(
        &gpt(&[
            "--nproc-per-node",
            "2",
            "--pp",
            "2",
            "--pp-schedule",
            "interleaved",
            "--microbatches",
            "5",
            "--depth",
            "4",
        ]),
        &["--microbatches 5 does not split into 2 equal rounds"],
    );
    refused_saying(
        &gpt(&["--microbatches", "4"]),
        &["--microbatches shapes a pipeline: it needs --pp 2"],
    );
    refused_saying(
        &gpt(&["--pp-schedule", "zero-bubble"]),
        &["expected gpipe, 1f1b or interleaved"],
    );
}
