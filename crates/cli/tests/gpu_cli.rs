//! `--device cuda` and `--backend nccl` through the real binary (issue #8), in every build:
//! - without the `cuda`/`nccl` features, they fail at once naming the feature;
//! - with them on a machine without a GPU (CI), they fail at once naming what was looked for
//!   (the driver library, NCCL, `PHALANX_NCCL_LIBRARY`), never a panic or a hang;
//! - with them on a GPU machine, a short run trains on the GPU (1 rank, and 2 ranks sharing
//!   GPU 0 with host-side reduction) and `bench allreduce --backend nccl --check` passes on one
//!   rank; without a GPU those print why they skip. `gpu/check.sh` measures the same on a lent
//!   GPU.
//!
//! Every command runs with a deadline and is killed with its ranks when it passes it.

mod launch_util;

use std::time::Duration;

use launch_util::{phalanx, run, Finished};

const DEADLINE: Duration = Duration::from_secs(120);
/// On a fresh GPU machine Burn's CUDA backend compiles every kernel with NVRTC first (about 70 s
/// for the seed recipe on an H200, docs/gpu.md).
const GPU_DEADLINE: Duration = Duration::from_secs(600);

fn phalanx_run(args: &[&str], env: &[(&str, &str)]) -> Finished {
    phalanx_run_within(args, env, DEADLINE)
}

fn phalanx_run_within(args: &[&str], env: &[(&str, &str)], deadline: Duration) -> Finished {
    let mut cmd = phalanx();
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(cmd, deadline)
}

/// The failure of a command that must fail fast with a sentence: exit 1, no panic.
fn fails(f: &Finished, what: &str) -> String {
    assert_eq!(
        f.code(),
        Some(1),
        "{what}: expected exit 1\nstdout:\n{}\nstderr:\n{}",
        f.stdout,
        f.stderr
    );
    assert!(
        !f.stderr.contains("panicked"),
        "{what}: panicked\n{}",
        f.stderr
    );
    f.stderr.clone()
}

/// Whether this machine has a GPU the `cuda` build can use, or why not.
fn gpu() -> Result<(), String> {
    if !cfg!(feature = "cuda") {
        return Err("built without the `cuda` feature".into());
    }
    // `--device cuda:4096` fails naming the GPU count when there is a driver, the driver
    // otherwise: one way to ask the binary itself.
    let f = phalanx_run(&["train", "--standalone", "--device", "cuda:4096"], &[]);
    if f.stderr.contains("does not exist") {
        Ok(())
    } else {
        Err(f.stderr.lines().last().unwrap_or("no GPU").to_string())
    }
}

#[test]
fn unknown_device_is_refused_by_the_parser() {
    let f = phalanx_run(&["train", "--device", "tpu"], &[]);
    assert_eq!(f.code(), Some(2), "{}", f.stderr);
    assert!(f.stderr.contains("cpu, cuda or cuda:N"), "{}", f.stderr);
}

#[test]
fn device_cuda_fails_fast_naming_what_is_missing() {
    let f = phalanx_run(&["train", "--device", "cuda", "--nproc-per-node", "1"], &[]);
    if cfg!(feature = "cuda") && gpu().is_ok() {
        println!("skipped: this machine has a GPU, so `--device cuda` does not fail here");
        return;
    }
    let err = fails(&f, "--device cuda");
    if cfg!(feature = "cuda") {
        assert!(
            err.contains("libcuda.so.1") || err.contains("CUDA driver"),
            "names the driver it looked for: {err}"
        );
    } else {
        assert!(
            err.contains("`cuda` feature") && err.contains("--features cuda"),
            "names the feature: {err}"
        );
    }
}

#[test]
fn backend_nccl_fails_fast_naming_what_is_missing() {
    let args = [
        "bench",
        "allreduce",
        "--backend",
        "nccl",
        "--nproc-per-node",
        "1",
        "--sizes",
        "1K",
    ];
    let f = phalanx_run(&args, &[]);
    if cfg!(feature = "nccl") && f.code() == Some(0) {
        println!("skipped: NCCL and a GPU are here, so `--backend nccl` does not fail");
        return;
    }
    let err = fails(&f, "--backend nccl");
    if cfg!(feature = "nccl") {
        assert!(
            err.contains("libnccl.so.2") || err.contains("CUDA driver") || err.contains("GPU"),
            "names NCCL, the driver or the GPU: {err}"
        );
    } else {
        assert!(
            err.contains("`nccl` feature") && err.contains("--features nccl"),
            "names the feature: {err}"
        );
    }
}

#[cfg(feature = "nccl")]
#[test]
fn phalanx_nccl_library_is_the_only_place_tried_when_set() {
    let path = "/nonexistent/phalanx-test/libnccl.so.2";
    let f = phalanx_run(
        &[
            "bench",
            "allreduce",
            "--backend",
            "nccl",
            "--nproc-per-node",
            "1",
        ],
        &[("PHALANX_NCCL_LIBRARY", path)],
    );
    let err = fails(&f, "PHALANX_NCCL_LIBRARY=<missing file>");
    assert!(
        err.contains(&format!("PHALANX_NCCL_LIBRARY={path}")),
        "names the variable and its value: {err}"
    );
}

#[test]
fn trains_on_the_gpu_with_one_rank_and_two_sharing_it() {
    if let Err(why) = gpu() {
        println!("skipped: no usable GPU ({why})");
        return;
    }
    for (nproc, device) in [("1", "cuda"), ("2", "cuda:0")] {
        let f = phalanx_run_within(
            &[
                "train",
                "--standalone",
                "--json",
                "--device",
                device,
                "--nproc-per-node",
                nproc,
                "--epochs",
                "2",
            ],
            &[],
            GPU_DEADLINE,
        );
        assert_eq!(
            f.code(),
            Some(0),
            "{nproc} rank(s)\n{}\n{}",
            f.stdout,
            f.stderr
        );
        let summaries = f.stdout.matches("\"event\":\"summary\"").count();
        assert_eq!(summaries.to_string(), nproc, "{}", f.stdout);
    }
}

#[test]
fn nccl_allreduce_checks_on_one_gpu() {
    if !cfg!(feature = "nccl") {
        println!("skipped: built without the `nccl` feature");
        return;
    }
    if let Err(why) = gpu() {
        println!("skipped: no usable GPU ({why})");
        return;
    }
    for dtype in ["f32", "bf16", "i64"] {
        let f = phalanx_run(
            &[
                "bench",
                "allreduce",
                "--backend",
                "nccl",
                "--nproc-per-node",
                "1",
                "--sizes",
                "4K,1M",
                "--dtype",
                dtype,
                "--check",
            ],
            &[],
        );
        assert_eq!(f.code(), Some(0), "{dtype}\n{}\n{}", f.stdout, f.stderr);
    }
}
