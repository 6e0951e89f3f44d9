//! `phalanx` under Open MPI's `mpirun` (issue #7 item 4), through the real binary:
//! - with the `mpi` feature, `--backend mpi` trains to the recipe's accuracy with the same
//!   parameters on every rank, `bench allreduce --check` passes for every dtype and op,
//!   `bench train` reports, and a failing rank ends the job at once (`MPI_Abort`);
//! - in every build, the native backend runs under `mpirun` with no launcher (ranks from
//!   `OMPI_COMM_WORLD_*`), and without the feature `--backend mpi` fails naming it.
//!
//! Without Open MPI's `mpirun` on PATH the mpirun tests print why they skip. Every `mpirun`
//! runs in its own session and is killed with its ranks when it passes its deadline.

mod launch_util;

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use launch_util::{free_port, phalanx, run, run_session, train_summaries, Finished};

/// `mpirun -np <np> <flags> <phalanx> <args>` for Open MPI, or `None` (with the reason
/// printed) when there is no Open MPI `mpirun` here.
fn mpirun(test: &str, np: usize, flags: &[&str], args: &[&str]) -> Option<Command> {
    let version = Command::new("mpirun").arg("--version").output();
    let text = match &version {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => {
            eprintln!("{test}: skipped: no mpirun on PATH ({e}); install openmpi-bin");
            return None;
        }
    };
    if !text.contains("Open MPI") {
        eprintln!(
            "{test}: skipped: mpirun is not Open MPI's ({})",
            text.trim()
        );
        return None;
    }
    let mut c = Command::new("mpirun");
    // No launcher variables from whatever runs the tests (set before ours below).
    phalanx_testing::process::clean_env(&mut c);
    // --allow-run-as-root: CI runs as root in a container. --oversubscribe: more ranks than
    // cores. vader's single-copy (CMA) needs ptrace rights that containers often deny.
    c.args([
        "-np",
        &np.to_string(),
        "--oversubscribe",
        "--allow-run-as-root",
    ])
    .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    .args(flags)
    .arg(env!("CARGO_BIN_EXE_phalanx"))
    .args(args)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    Some(c)
}

/// Runs `cmd` (an mpirun) within `deadline`, in a session of its own: on a timeout every
/// rank is found (and killed) by its session id, even the ones mpirun leaves behind when it is
/// killed itself.
fn run_mpi(cmd: Command, deadline: Duration) -> Finished {
    run_session(cmd, deadline, Duration::from_secs(5))
}

/// Asserts `np` summaries, one per rank, every one at least `min_accuracy` and every digest
/// equal; returns the digest.
fn assert_trained(f: &Finished, np: usize, min_accuracy: f64) -> String {
    assert_eq!(
        f.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        f.stdout,
        f.stderr
    );
    let s = train_summaries(&f.stdout);
    assert_eq!(
        s.iter().map(|x| x.0).collect::<Vec<_>>(),
        (0..np as u64).collect::<Vec<_>>(),
        "one summary per rank expected:\n{}",
        f.stdout
    );
    for (rank, acc, digest) in &s {
        assert!(
            *acc >= min_accuracy,
            "rank {rank}: accuracy {acc}\n{}",
            f.stdout
        );
        assert_eq!(
            digest, &s[0].2,
            "rank {rank}'s parameters differ from rank 0's"
        );
    }
    s[0].2.clone()
}

#[test]
fn native_backend_runs_under_mpirun_without_a_launcher() {
    // MASTER_ADDR defaults to 127.0.0.1 when every rank is on this host; a free port keeps
    // parallel tests apart (the default is 29500).
    let port = format!("MASTER_PORT={}", free_port());
    let Some(cmd) = mpirun(
        "native_backend_runs_under_mpirun_without_a_launcher",
        2,
        &["-x", &port],
        &["train", "--json"],
    ) else {
        return;
    };
    let f = run_mpi(cmd, Duration::from_secs(240));
    assert_trained(&f, 2, 0.95);
}

#[cfg(not(feature = "mpi"))]
#[test]
fn backend_mpi_without_the_feature_names_it() {
    for sub in [&["train"][..], &["bench", "allreduce"], &["bench", "train"]] {
        let mut cmd = phalanx();
        cmd.args(sub).args(["--backend", "mpi"]);
        let f = run(cmd, Duration::from_secs(30));
        assert_eq!(f.code(), Some(1), "{sub:?}: {}", f.stderr);
        assert!(
            f.stderr.contains("built without the `mpi` feature")
                && f.stderr.contains("--features mpi"),
            "{sub:?}: {}",
            f.stderr
        );
    }
}

#[test]
fn unknown_backends_are_refused_by_name() {
    let mut cmd = phalanx();
    cmd.args(["train", "--backend", "gloo"]);
    let f = run(cmd, Duration::from_secs(30));
    assert_eq!(f.code(), Some(2), "{}", f.stderr);
    assert!(
        f.stderr.contains("\"gloo\"") && f.stderr.contains("`mpi`"),
        "{}",
        f.stderr
    );
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;

    #[test]
    fn mpi_backend_trains_to_the_recipes_accuracy_with_identical_replicas() {
        let dir = launch_util::TempDir::new("mpi-trace");
        let trace = format!("PHALANX_TRACE={}/t", dir.str());
        let Some(cmd) = mpirun(
            "mpi_backend_trains_to_the_recipes_accuracy_with_identical_replicas",
            2,
            &["-x", &trace],
            &["train", "--backend", "mpi", "--json"],
        ) else {
            return;
        };
        let f = run_mpi(cmd, Duration::from_secs(240));
        // The seed recipe's bar (train_cli.rs): 95% on the digits with the default flags.
        assert_trained(&f, 2, 0.95);
        // The trace machinery works unchanged: every rank's collectives, run by MPI.
        for r in 0..2 {
            let t = std::fs::read_to_string(dir.path().join(format!("t.rank{r}.json")))
                .unwrap_or_else(|e| panic!("rank {r}'s trace: {e}"));
            assert!(
                t.contains("\"name\":\"allreduce\"") && t.contains("\"algorithm\":\"MPI\""),
                "{}",
                &t[..t.len().min(500)]
            );
        }
    }

    #[test]
    fn a_sharding_mode_the_mpi_backend_cannot_run_is_refused_naming_both() {
        let Some(cmd) = mpirun(
            "a_sharding_mode_the_mpi_backend_cannot_run_is_refused_naming_both",
            2,
            &[],
            &[
                "train",
                "--backend",
                "mpi",
                "--sharding",
                "grad",
                "--max-steps",
                "2",
            ],
        ) else {
            return;
        };
        let f = run_mpi(cmd, Duration::from_secs(120));
        assert_ne!(f.code(), Some(0), "{}", f.stdout);
        assert!(
            f.stderr.contains("--sharding grad")
                && f.stderr.contains("reduce_scatter_v")
                && f.stderr.contains("the mpi backend does not offer"),
            "{}",
            f.stderr
        );
    }

    #[test]
    fn mpi_backend_trains_on_four_ranks() {
        let Some(cmd) = mpirun(
            "mpi_backend_trains_on_four_ranks",
            4,
            &[],
            &["train", "--backend", "mpi", "--json", "--lr", "0.04"],
        ) else {
            return;
        };
        let f = run_mpi(cmd, Duration::from_secs(240));
        assert_trained(&f, 4, 0.95);
    }

    #[test]
    fn mpi_bench_allreduce_check_passes_for_every_dtype_and_op() {
        let cases: &[(&str, &str, &str)] = &[
            ("f32", "sum", "4K..4M:4"),
            ("f32", "avg", "4K,36K"),
            ("f64", "product", "4K,36K"),
            ("bf16", "sum", "4K,36K"),
            ("f16", "avg", "4K,36K"),
            ("i32", "min", "4K,36K"),
            ("i64", "max", "4K,36K"),
        ];
        for (dtype, op, sizes) in cases {
            let Some(cmd) = mpirun(
                "mpi_bench_allreduce_check_passes_for_every_dtype_and_op",
                3,
                &[],
                &[
                    "bench",
                    "allreduce",
                    "--backend",
                    "mpi",
                    "--check",
                    "--iters",
                    "3",
                    "--warmup",
                    "1",
                    "--dtype",
                    dtype,
                    "--op",
                    op,
                    "--sizes",
                    sizes,
                ],
            ) else {
                return;
            };
            let f = run_mpi(cmd, Duration::from_secs(120));
            let ctx = format!("{dtype} {op}\nstdout:\n{}\nstderr:\n{}", f.stdout, f.stderr);
            assert_eq!(f.code(), Some(0), "{ctx}");
            assert!(f.stdout.contains("3 ranks, backend mpi"), "{ctx}");
            let rows: Vec<&str> = f
                .stdout
                .lines()
                .filter(|l| !l.starts_with('#'))
                .skip(1)
                .collect();
            assert!(!rows.is_empty(), "{ctx}");
            for row in rows {
                assert!(
                    row.trim_end().ends_with("ok") && row.contains(dtype),
                    "{ctx}"
                );
            }
        }
    }

    #[test]
    fn mpi_bench_train_reports_its_world() {
        let Some(cmd) = mpirun(
            "mpi_bench_train_reports_its_world",
            2,
            &[],
            &[
                "bench",
                "train",
                "--backend",
                "mpi",
                "--steps",
                "5",
                "--warmup",
                "1",
                "--json",
            ],
        ) else {
            return;
        };
        let f = run_mpi(cmd, Duration::from_secs(120));
        assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
        let rows: Vec<&str> = f
            .stdout
            .lines()
            .filter(|l| l.contains("\"bench\":\"train\""))
            .collect();
        assert_eq!(rows.len(), 1, "{}", f.stdout);
        assert!(rows[0].contains("\"world\":2,"), "{}", rows[0]);
    }

    #[test]
    fn a_failing_rank_ends_the_mpi_job_at_once() {
        // Only rank 0 writes checkpoints: it fails at the first epoch's end while rank 1 goes
        // on into the next allreduce, where it would wait forever without MPI_Abort.
        let Some(cmd) = mpirun(
            "a_failing_rank_ends_the_mpi_job_at_once",
            2,
            &[],
            &[
                "train",
                "--backend",
                "mpi",
                "--epochs",
                "50",
                "--checkpoint-dir",
                "/proc/phalanx-no-such-dir",
            ],
        ) else {
            return;
        };
        let f = run_mpi(cmd, Duration::from_secs(120));
        assert_ne!(f.code(), Some(0), "{}", f.stdout);
        assert!(
            f.stderr.contains("rank 0 failed: checkpoint") && f.stderr.contains("MPI_Abort"),
            "{}",
            f.stderr
        );
        assert!(
            !f.stdout.contains("epoch   3/50"),
            "the job went on after rank 0 failed:\n{}",
            f.stdout
        );
    }

    #[test]
    fn mpi_backend_refuses_another_launchers_ranks() {
        let mut cmd = phalanx();
        cmd.args(["train", "--backend", "mpi"])
            .env("RANK", "0")
            .env("WORLD_SIZE", "2")
            .env_remove("OMPI_COMM_WORLD_RANK")
            .env_remove("PMI_RANK")
            .env_remove("PMIX_RANK");
        let f = run(cmd, Duration::from_secs(30));
        assert_eq!(f.code(), Some(1), "{}", f.stderr);
        assert!(
            f.stderr.contains("needs an MPI launcher") && f.stderr.contains("mpirun -np N"),
            "{}",
            f.stderr
        );
    }

    #[test]
    fn mpi_backend_refuses_nproc_per_node() {
        let mut cmd = phalanx();
        cmd.args(["train", "--backend", "mpi", "--nproc-per-node", "2"]);
        let f = run(cmd, Duration::from_secs(30));
        assert_eq!(f.code(), Some(1), "{}", f.stderr);
        assert!(f.stderr.contains("mpirun -np N"), "{}", f.stderr);
    }
}
