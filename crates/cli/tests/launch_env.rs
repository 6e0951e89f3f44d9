//! `phalanx launch`: the workers' environment, output prefixing and filtering, log files,
//! exit codes, PET_* variables. Every test runs the real binary under a deadline.

mod launch_util;

use std::collections::BTreeMap;
use std::time::Duration;

use launch_util::*;

const DEADLINE: Duration = Duration::from_secs(20);

#[test]
fn workers_get_the_torchrun_environment() {
    let script = r#"echo ENV $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE \
        $ROLE_RANK $ROLE_NAME $ROLE_WORLD_SIZE $MASTER_ADDR $TORCHELASTIC_RESTART_COUNT \
        $TORCHELASTIC_MAX_RESTARTS $TORCHELASTIC_USE_AGENT_STORE $PHALANX_STORE_PREFIX \
        $OMP_NUM_THREADS ${#PHALANX_TOKEN} $PHALANX_LAUNCHED $PHALANX_JOB_ID $TORCHELASTIC_RUN_ID ARG=$0
        echo PORT $MASTER_PORT"#;
    let mut cmd = phalanx();
    cmd.args([
        "launch",
        "--standalone",
        "--nproc-per-node",
        "3",
        "--run-id",
        "envtest",
    ])
    .args(["--", "sh", "-c", script, "arg${local_rank}"]);
    let f = run(cmd, DEADLINE);
    assert_eq!(f.code(), Some(0), "{f:?}");
    let lines = rank_lines(&f.stdout);
    let mut ports = Vec::new();
    let mut seen = BTreeMap::new();
    for (rank, body) in &lines {
        if let Some(p) = body.strip_prefix("PORT ") {
            ports.push(p.to_string());
            continue;
        }
        let expected = format!(
            "ENV {rank} 3 {rank} 3 0 1 {rank} default 3 127.0.0.1 0 0 True round/0 1 64 1 envtest envtest ARG=arg{rank}"
        );
        assert_eq!(body, &expected);
        seen.insert(*rank, ());
    }
    assert_eq!(seen.len(), 3, "{f:?}");
    // One store for the job: every rank sees the same real (non-zero) port.
    assert_eq!(ports.len(), 3);
    assert!(
        ports
            .iter()
            .all(|p| p == &ports[0] && p != "0" && p != "29500"),
        "{ports:?}"
    );
    // torchrun's OMP_NUM_THREADS warning, once.
    assert_eq!(
        f.stderr.matches("Setting OMP_NUM_THREADS").count(),
        1,
        "{}",
        f.stderr
    );
}

#[test]
fn omp_num_threads_is_kept_when_set_or_single_process() {
    let mut cmd = launch_sh(
        &["--standalone", "--nproc-per-node", "2"],
        "echo OMP=$OMP_NUM_THREADS",
    );
    cmd.env("OMP_NUM_THREADS", "4");
    let f = run(cmd, DEADLINE);
    assert_eq!(f.code(), Some(0));
    assert_eq!(f.stdout.matches("OMP=4").count(), 2, "{f:?}");
    assert!(!f.stderr.contains("Setting OMP_NUM_THREADS"));
    let f = run(
        launch_sh(&["--standalone"], "echo OMP=$OMP_NUM_THREADS."),
        DEADLINE,
    );
    assert!(f.stdout.contains("OMP=."), "{f:?}");
}

#[test]
fn pet_variables_configure_the_launch() {
    let mut cmd = launch_sh(&[], "echo $RANK/$WORLD_SIZE");
    cmd.env("PET_NPROC_PER_NODE", "3")
        .env("PET_STANDALONE", "1");
    let f = run(cmd, DEADLINE);
    assert_eq!(f.code(), Some(0), "{f:?}");
    let mut ranks: Vec<String> = rank_lines(&f.stdout).into_iter().map(|(_, b)| b).collect();
    ranks.sort();
    assert_eq!(ranks, ["0/3", "1/3", "2/3"]);
    // A flag beats its variable.
    let mut cmd = launch_sh(&["--nproc-per-node", "1"], "echo $WORLD_SIZE");
    cmd.env("PET_NPROC_PER_NODE", "3")
        .env("PET_STANDALONE", "true");
    let f = run(cmd, DEADLINE);
    assert_eq!(rank_lines(&f.stdout), [(0, "1".to_string())]);
}

#[test]
fn output_is_prefixed_per_line_and_per_stream() {
    // Many lines from each rank at once: every line must arrive whole, with its own prefix.
    let script = r#"i=0; while [ $i -lt 300 ]; do echo "line $i of rank $RANK"; echo "err $i of rank $RANK" >&2; i=$((i+1)); done; printf 'no newline'"#;
    let f = run(
        launch_sh(&["--standalone", "--nproc-per-node", "2"], script),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(0), "{}", f.stderr);
    let out = rank_lines(&f.stdout);
    assert_eq!(out.len(), 2 * 301, "{}", f.stdout);
    for (rank, body) in &out {
        assert!(
            body == "no newline"
                || (body.starts_with("line ") && body.ends_with(&format!("of rank {rank}"))),
            "mixed line: [rank {rank}]: {body}"
        );
    }
    assert!(
        f.stdout.lines().all(|l| l.starts_with("[rank ")),
        "unprefixed stdout line"
    );
    let err = rank_lines(&f.stderr);
    assert_eq!(err.len(), 2 * 300);
    assert!(err
        .iter()
        .all(|(r, b)| b.starts_with("err ") && b.ends_with(&format!("of rank {r}"))));
}

#[test]
fn local_ranks_filter_hides_other_ranks() {
    let f = run(
        launch_sh(
            &[
                "--standalone",
                "--nproc-per-node",
                "3",
                "--local-ranks-filter",
                "1,2",
            ],
            "echo hi; echo e >&2",
        ),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(0));
    let mut shown: Vec<u32> = rank_lines(&f.stdout).into_iter().map(|(r, _)| r).collect();
    shown.sort();
    assert_eq!(shown, [1, 2], "{}", f.stdout);
    assert!(!f.stderr.contains("[rank 0]"));
}

#[test]
fn log_dir_and_tee_write_files_per_attempt_and_rank() {
    let dir = TempDir::new("logdir");
    let f = run(
        launch_sh(
            &[
                "--standalone",
                "--nproc-per-node",
                "2",
                "--run-id",
                "job1",
                "--log-dir",
                dir.str(),
                "--tee",
                "0:1,1:3",
            ],
            "echo out $RANK; echo err $RANK >&2; echo file=$TORCHELASTIC_ERROR_FILE",
        ),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(0), "{f:?}");
    let base = dir.path().join("job1").join("attempt_0");
    let read =
        |lr: u32, name: &str| std::fs::read_to_string(base.join(lr.to_string()).join(name)).ok();
    assert_eq!(read(0, "stdout.log").unwrap().lines().next(), Some("out 0"));
    assert_eq!(read(0, "stderr.log"), None, "local rank 0 tees stdout only");
    assert!(read(1, "stdout.log").unwrap().starts_with("out 1\n"));
    assert_eq!(read(1, "stderr.log").unwrap(), "err 1\n");
    // The console still shows everything.
    assert_eq!(rank_lines(&f.stderr).len(), 2);
    let want = format!("file={}", base.join("1").join("error.json").display());
    assert!(f.stdout.contains(&want), "{}", f.stdout);
}

#[test]
fn exit_code_of_the_failing_worker_propagates() {
    let f = run(
        launch_sh(
            &["--standalone", "--nproc-per-node", "2"],
            "if [ $RANK = 1 ]; then echo 'bad config' >&2; exit 3; fi",
        ),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(3), "{f:?}");
    assert!(
        f.stderr.contains("root cause: rank 1 (local_rank 1"),
        "{}",
        f.stderr
    );
    assert!(f.stderr.contains("exit code 3"));
    assert!(f.stderr.contains("last line: bad config"));
}

#[test]
fn bad_flags_and_missing_programs_get_a_sentence() {
    let f = run(
        launch_sh(&["--nnodes", "2", "--standalone"], "true"),
        DEADLINE,
    );
    assert_ne!(f.code(), Some(0));
    assert!(
        f.stderr.contains("--standalone is single-node"),
        "{}",
        f.stderr
    );
    let f = run(
        launch_sh(&["--nnodes", "2", "--master-port", "1"], "true"),
        DEADLINE,
    );
    assert!(f.stderr.contains("PHALANX_TOKEN"), "{}", f.stderr);
    let mut cmd = phalanx();
    cmd.args(["launch", "--standalone", "--", "/nonexistent/program"]);
    let f = run(cmd, DEADLINE);
    assert_ne!(f.code(), Some(0));
    assert!(
        f.stderr.contains("cannot start local rank 0"),
        "{}",
        f.stderr
    );
}

#[test]
fn port_in_use_is_reported() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    let f = run(launch_sh(&["--master-port", &port], "true"), DEADLINE);
    assert_ne!(f.code(), Some(0));
    assert!(
        f.stderr.contains("cannot host the store") && f.stderr.contains(&port),
        "{}",
        f.stderr
    );
}

#[test]
fn two_workers_that_exit_at_once_take_well_under_a_second() {
    // Warm the binary's pages first; measure the second run.
    let _ = run(
        launch_sh(&["--standalone", "--nproc-per-node", "2"], "true"),
        DEADLINE,
    );
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let f = run(
            launch_sh(&["--standalone", "--nproc-per-node", "2"], "true"),
            DEADLINE,
        );
        assert_eq!(f.code(), Some(0));
        best = best.min(f.elapsed);
    }
    eprintln!("phalanx launch, 2 workers of `true`: {best:?}");
    // The target is 0.2 s; allow a loaded test machine some slack.
    assert!(best < Duration::from_millis(500), "{best:?}");
}
