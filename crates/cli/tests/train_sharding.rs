//! `phalanx train --sharding optimizer|grad|full` through the real binary on 2–4 ranks, each
//! mode against DDP (`--sharding none`): the MLP, the CNN (BatchNorm buffers) and the
//! transformer, SGD with momentum and Adam, clipping by global norm, frozen parameters; a
//! sharded checkpoint written at 4 ranks resumed at 4, 3 and 2 ranks and under DDP; the
//! consolidated file; bad input named.

mod launch_util;

use std::time::Duration;

use launch_util::{phalanx, run, train_ok, train_summaries, Finished, TempDir};
use phalanx_checkpoint::{self as checkpoint, NamedTensor};

fn train(args: &[&str]) -> Finished {
    train_ok(args, Duration::from_secs(400))
}

/// The digest every rank reports; they must agree.
fn digest(f: &Finished) -> String {
    let s = train_summaries(&f.stdout);
    assert!(!s.is_empty(), "no summary\n{}", f.stdout);
    assert!(
        s.iter().all(|x| x.2 == s[0].2),
        "replicas differ: {s:?}\n{}",
        f.stderr
    );
    s[0].2.clone()
}

fn accuracy(f: &Finished) -> f64 {
    train_summaries(&f.stdout)[0].1
}

/// Every mode's parameters and buffers after `args` equal DDP's, bit for bit.
fn every_mode_equals_ddp(args: &[&str]) {
    let ddp = digest(&train(&[args, &["--sharding", "none"]].concat()));
    for mode in ["optimizer", "grad", "full"] {
        let got = digest(&train(&[args, &["--sharding", mode]].concat()));
        assert_eq!(got, ddp, "--sharding {mode} {args:?} differs from DDP");
    }
}

#[test]
fn the_mlp_in_every_mode_is_bitwise_ddp_on_two_three_and_four_ranks() {
    for n in ["2", "3", "4"] {
        every_mode_equals_ddp(&[
            "--nproc-per-node",
            n,
            "--depth",
            "2",
            "--optimizer",
            "adam",
            "--lr",
            "0.001",
            "--max-steps",
            "50",
        ]);
    }
    // SGD with momentum and weight decay, clipping by global norm on 3 ranks.
    every_mode_equals_ddp(&[
        "--nproc-per-node",
        "3",
        "--momentum",
        "0.9",
        "--weight-decay",
        "0.01",
        "--lr",
        "0.05",
        "--grad-clip",
        "0.5",
        "--max-steps",
        "50",
    ]);
}

#[test]
fn the_cnn_and_the_transformer_in_every_mode_are_bitwise_ddp() {
    for (model, optimizer) in [("cnn", "sgd"), ("transformer", "adam")] {
        every_mode_equals_ddp(&[
            "--model",
            model,
            "--dataset",
            "mnist5k",
            "--optimizer",
            optimizer,
            "--momentum",
            if optimizer == "sgd" { "0.9" } else { "0" },
            "--lr",
            "0.01",
            "--batch-size",
            "16",
            "--max-steps",
            "50",
        ]);
    }
}

fn tensor<'a>(ts: &'a [NamedTensor], name: &str) -> &'a NamedTensor {
    ts.iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tensor {name}"))
}

#[test]
fn frozen_parameters_stay_bitwise_unchanged_under_full_sharding() {
    let (early, late) = (
        TempDir::new("shard-freeze-1"),
        TempDir::new("shard-freeze-2"),
    );
    let common = [
        "--sharding",
        "full",
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
    train(
        &[
            &common[..],
            &["--checkpoint-dir", late.str(), "--epochs", "2"],
        ]
        .concat(),
    );
    let a = checkpoint::load_latest(early.path()).unwrap().unwrap();
    let b = checkpoint::load_latest(late.path()).unwrap().unwrap();
    assert!(a.meta.sharded.is_some() && b.meta.sharded.is_some());
    for name in ["layers.0.weight", "layers.0.bias"] {
        assert!(
            tensor(&a.tensors, name).data == tensor(&b.tensors, name).data,
            "frozen {name} moved"
        );
    }
    assert!(
        tensor(&a.tensors, "layers.1.weight").data != tensor(&b.tensors, "layers.1.weight").data
    );
}

/// `phalanx train` at `n` ranks under `mode`, resuming from `dir` (copied first, so that each
/// resume starts from the same checkpoint).
fn resumed(from: &TempDir, n: &str, mode: &str, common: &[&str]) -> Finished {
    let dir = TempDir::new(&format!("shard-resume-{n}-{mode}"));
    for e in std::fs::read_dir(from.path()).unwrap().flatten() {
        std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    let more = [
        "--nproc-per-node",
        n,
        "--sharding",
        mode,
        "--checkpoint-dir",
        dir.str(),
        "--resume",
    ];
    train(&[common, &more[..]].concat())
}

#[test]
fn a_full_checkpoint_of_four_ranks_resumes_at_four_three_and_two_ranks_and_under_ddp() {
    let common = [
        "--depth",
        "2",
        "--optimizer",
        "adam",
        "--lr",
        "0.001",
        "--epochs",
        "2",
    ];
    let (sharded, whole) = (TempDir::new("shard-ck-full"), TempDir::new("shard-ck-ddp"));
    // Mid-epoch, at 4 ranks: under full (every rank writes its shard) and under DDP.
    for (mode, dir) in [("full", &sharded), ("none", &whole)] {
        let more = [
            "--nproc-per-node",
            "4",
            "--sharding",
            mode,
            "--checkpoint-dir",
            dir.str(),
            "--checkpoint-every",
            "30",
            "--max-steps",
            "30",
        ];
        train(&[&common[..], &more[..]].concat());
    }
    let ck = checkpoint::load_latest(sharded.path()).unwrap().unwrap();
    let layout = ck.meta.sharded.as_ref().expect("a sharded checkpoint");
    assert_eq!((layout.shards.len(), layout.sharding.as_str()), (4, "full"));
    // Both hold the same training state: the same tensors, bit for bit, and optimizer state.
    let ddp_ck = checkpoint::load_latest(whole.path()).unwrap().unwrap();
    assert_eq!(ck.tensors, ddp_ck.tensors);
    assert!(ck.optim_state.is_some());
    // An uninterrupted run, and the same at 4 ranks resumed under full and under DDP.
    let more = ["--nproc-per-node", "4"];
    let uninterrupted = train(&[&common[..], &more[..]].concat());
    let want = digest(&uninterrupted);
    assert_eq!(digest(&resumed(&sharded, "4", "full", &common)), want);
    assert_eq!(digest(&resumed(&sharded, "4", "none", &common)), want);
    // At 3 and 2 ranks the rest of the epoch is re-sharded and the sums group differently:
    // the run equals DDP resumed at that world size from its own checkpoint of the same step.
    for (n, mode) in [("3", "grad"), ("2", "full")] {
        let got = resumed(&sharded, n, mode, &common);
        let ddp = resumed(&whole, n, "none", &common);
        assert_eq!(digest(&got), digest(&ddp), "{n} ranks under {mode}");
        // More steps per epoch at fewer ranks: it trains at least as well.
        let (a, b) = (accuracy(&got), accuracy(&uninterrupted));
        assert!(
            a > b - 0.03,
            "{n} ranks: accuracy {a} against {b} uninterrupted"
        );
    }
    // One file for PyTorch: the tensors of the whole checkpoint, in PyTorch's layout.
    let out = sharded.path().join("consolidated.safetensors");
    let mut cmd = phalanx();
    cmd.args(["checkpoint", "consolidate", sharded.str(), "--out"])
        .arg(&out);
    let f = run(cmd, Duration::from_secs(60));
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    assert!(
        f.stdout.contains("4 shards, --sharding full"),
        "{}",
        f.stdout
    );
    let bytes = std::fs::read(&out).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
    names.sort();
    let want: Vec<String> = ddp_ck.tensors.iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, want);
    for t in &ddp_ck.tensors {
        let v = st.tensor(&t.name).unwrap();
        assert_eq!(v.shape(), t.shape.as_slice(), "{}", t.name);
        assert_eq!(
            v.data(),
            bytemuck::cast_slice::<f32, u8>(&t.data),
            "{}",
            t.name
        );
    }
    // PyTorch takes it into the same architecture with strict=True.
    let test = "a_full_checkpoint_consolidated_loads_into_torch_strictly";
    if let Some(py) = phalanx_testing::process::torch_python(test) {
        let script = r#"
import sys, torch
from safetensors.torch import load_file
class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            [torch.nn.Linear(64, 128), torch.nn.Linear(128, 128), torch.nn.Linear(128, 10)])
m = Mlp()
m.load_state_dict(load_file(sys.argv[1]), strict=True)
print("loaded", float(m.layers[2].weight.double().sum()))
"#;
        let mut cmd = std::process::Command::new(py);
        cmd.args(["-c", script])
            .arg(&out)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let f = run(cmd, Duration::from_secs(120));
        assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
        let want: f64 = tensor(&ddp_ck.tensors, "layers.2.weight")
            .data
            .iter()
            .map(|&v| f64::from(v))
            .sum();
        let got: f64 = f
            .stdout
            .trim()
            .strip_prefix("loaded ")
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            (got - want).abs() < 1e-9,
            "torch sums {got}, the checkpoint {want}"
        );
    }
}

#[test]
fn a_damaged_or_missing_shard_is_named_and_the_older_checkpoint_resumes() {
    let dir = TempDir::new("shard-damaged");
    let common = [
        "--nproc-per-node",
        "3",
        "--sharding",
        "grad",
        "--epochs",
        "3",
    ];
    let more = ["--checkpoint-dir", dir.str(), "--max-steps", "150"];
    // Epochs end at steps 60 and 120; the run stops at 150 (no checkpoint there).
    train(&[&common[..], &more[..]].concat());
    let shard = dir
        .path()
        .join("step-000000000120.shard-00001-of-00003.safetensors");
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::write(&shard, &bytes[..bytes.len() - 3]).unwrap();
    let f = train(&[&common[..], &["--checkpoint-dir", dir.str(), "--resume"]].concat());
    assert!(
        f.stderr
            .contains("step-000000000120.shard-00001-of-00003.safetensors")
            && f.stderr.contains("the shard of rank 1 fails its checksum"),
        "{}",
        f.stderr
    );
    // It resumed from step 60: bitwise the uninterrupted run.
    assert_eq!(digest(&f), digest(&train(&common)));
    // A missing one is named the same way.
    std::fs::remove_file(
        dir.path()
            .join("step-000000000180.shard-00002-of-00003.safetensors"),
    )
    .unwrap();
    let mut cmd = phalanx();
    cmd.args(["checkpoint", "list", dir.str()]);
    let f = run(cmd, Duration::from_secs(60));
    assert!(
        f.stdout.contains("DAMAGED") && f.stdout.contains("the shard of rank 2 cannot be read"),
        "{}",
        f.stdout
    );
}

fn refused(args: &[&str]) -> String {
    let mut cmd = phalanx();
    cmd.arg("train").args(["--standalone"]).args(args);
    let f = run(cmd, Duration::from_secs(120));
    assert_ne!(f.code(), Some(0), "phalanx train {args:?} succeeded");
    f.stderr
}

#[test]
fn bad_sharding_input_is_named() {
    let e = refused(&["--sharding", "zero3"]);
    assert!(
        e.contains("unknown sharding \"zero3\"") && e.contains("full (ZeRO-3, FSDP)"),
        "{e}"
    );
    let e = refused(&[
        "--sharding",
        "full",
        "--fault-tolerance",
        "--max-steps",
        "5",
    ]);
    assert!(
        e.contains("--fault-tolerance with --sharding full") && e.contains("--max-restarts"),
        "{e}"
    );
}

#[test]
fn hybrid_replicates_shard_groups_and_its_checkpoint_resumes_under_other_modes() {
    // 4 ranks as 2 shard groups of 2 (the one-host stand-in for 2 hosts of 2).
    let common = [
        "--depth",
        "2",
        "--optimizer",
        "adam",
        "--lr",
        "0.001",
        "--epochs",
        "2",
    ];
    let hybrid = [
        "--nproc-per-node",
        "4",
        "--sharding",
        "hybrid",
        "--shard-group-size",
        "2",
    ];
    let h = train(&[&common[..], &hybrid[..]].concat());
    let d = train(&[&common[..], &["--nproc-per-node", "4"]].concat());
    // Replicas bitwise equal (digest() checks every rank); DDP's within rounding.
    let _ = digest(&h);
    assert!(
        (accuracy(&h) - accuracy(&d)).abs() < 0.01,
        "hybrid {} against DDP {}",
        accuracy(&h),
        accuracy(&d)
    );
    // Its checkpoint (the first group's shards) resumes at 2 ranks under full and under DDP,
    // which agree bit for bit.
    let dir = TempDir::new("shard-hybrid-ck");
    let more = [
        "--checkpoint-dir",
        dir.str(),
        "--checkpoint-every",
        "30",
        "--max-steps",
        "30",
    ];
    train(&[&common[..], &hybrid[..], &more[..]].concat());
    let ck = checkpoint::load_latest(dir.path()).unwrap().unwrap();
    assert_eq!(ck.meta.sharded.as_ref().unwrap().sharding, "hybrid");
    let full = resumed(&dir, "2", "full", &common);
    let ddp = resumed(&dir, "2", "none", &common);
    assert_eq!(digest(&full), digest(&ddp));
}

#[test]
fn under_hybrid_a_killed_rank_s_shard_comes_back_from_its_replica() {
    use launch_util::{start, wait_for_workers};
    let dir = TempDir::new("shard-hybrid-ft");
    let flags = [
        "train",
        "--standalone",
        "--json",
        "--max-restarts",
        "1",
        "--nproc-per-node",
        "4",
        "--sharding",
        "hybrid",
        "--shard-group-size",
        "2",
        "--fault-tolerance",
        "--optimizer",
        "adam",
        "--lr",
        "0.001",
        "--epochs",
        "20",
        "--checkpoint-every",
        "50",
        "--checkpoint-dir",
        dir.str(),
    ];
    let mut cmd = phalanx();
    cmd.args(flags);
    let job = start(cmd);
    let procs = wait_for_workers(job.pid(), 4);
    let begin = std::time::Instant::now();
    while launch_util::newest_step(dir.path()) < 150 {
        assert!(begin.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    let victim = procs.iter().find(|(_, r)| *r == 1).unwrap().0;
    // SAFETY: a plain signal to a worker this test started.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let f = job.wait(Duration::from_secs(300));
    let what = format!("stdout:\n{}\nstderr:\n{}", f.stdout, f.stderr);
    assert_eq!(f.code(), Some(0), "{what}");
    assert!(
        f.stderr.contains("the other ranks go on without it"),
        "{what}"
    );
    assert!(!f.stderr.contains("starting attempt"), "a restart: {what}");
    assert!(f.stdout.contains("\"event\":\"regrouped\""), "{what}");
    assert!(f.stderr.contains("this replacement joined"), "{what}");
    let got = train_summaries(&f.stdout);
    assert_eq!(got.len(), 4, "{what}");
    assert!(
        got.iter().all(|s| s.2 == got[0].2),
        "replicas differ: {what}"
    );
    assert!(got[0].1 > 0.9, "accuracy {}: {what}", got[0].1);
}
