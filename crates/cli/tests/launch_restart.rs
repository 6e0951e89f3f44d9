//! `phalanx launch --max-restarts`: new rounds after a failure, start-up failures that do not
//! count, and the distinct exit code when the restarts run out.

mod launch_util;

use std::time::Duration;

use launch_util::*;

const DEADLINE: Duration = Duration::from_secs(30);

fn attempts(stdout: &str, rank: u32) -> Vec<String> {
    rank_lines(stdout)
        .into_iter()
        .filter(|(r, b)| *r == rank && b.starts_with("attempt "))
        .map(|(_, b)| b)
        .collect()
}

#[test]
fn a_failure_in_round_zero_is_restarted_and_the_job_succeeds() {
    let script = "echo attempt $TORCHELASTIC_RESTART_COUNT $PHALANX_STORE_PREFIX; \
                  if [ $TORCHELASTIC_RESTART_COUNT = 0 ] && [ $RANK = 1 ]; then exit 7; fi";
    let f = run(
        launch_sh(
            &[
                "--standalone",
                "--nproc-per-node",
                "2",
                "--max-restarts",
                "1",
                "--startup-window",
                "1ms",
            ],
            script,
        ),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(0), "{f:?}");
    assert_eq!(
        attempts(&f.stdout, 1),
        ["attempt 0 round/0", "attempt 1 round/1"]
    );
    assert!(f.stderr.contains("root cause: rank 1"), "{}", f.stderr);
    assert!(
        f.stderr.contains("restart 1 of --max-restarts 1"),
        "{}",
        f.stderr
    );
}

#[test]
fn restarts_run_out_with_a_distinct_exit_code() {
    let script = "echo attempt $TORCHELASTIC_RESTART_COUNT; sleep 0.05; exit 4";
    let f = run(
        launch_sh(
            &[
                "--standalone",
                "--max-restarts",
                "2",
                "--startup-window",
                "1ms",
            ],
            script,
        ),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(125), "{f:?}");
    assert_eq!(
        attempts(&f.stdout, 0),
        ["attempt 0", "attempt 1", "attempt 2"]
    );
    assert!(f.stderr.contains("failed after 2 restarts"), "{}", f.stderr);
    // Without --max-restarts the worker's own code comes back.
    let f = run(launch_sh(&["--standalone"], script), DEADLINE);
    assert_eq!(f.code(), Some(4));
}

#[test]
fn startup_failures_do_not_use_up_restarts_but_are_bounded() {
    // Fails at once, every time: 3 start-up failures are free, then each counts.
    let f = run(
        launch_sh(
            &[
                "--standalone",
                "--max-restarts",
                "1",
                "--startup-window",
                "10s",
            ],
            "echo attempt $TORCHELASTIC_RESTART_COUNT; exit 2",
        ),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(125), "{f:?}");
    assert_eq!(attempts(&f.stdout, 0).len(), 5, "{}", f.stdout);
    assert_eq!(
        f.stderr
            .matches("does not count against --max-restarts")
            .count(),
        3,
        "{}",
        f.stderr
    );
    assert!(f.stderr.contains("failed after 1 restarts"));
}

#[test]
fn a_killed_worker_is_restarted() {
    let dir = TempDir::new("restartkill");
    let script = format!(
        "echo attempt $TORCHELASTIC_RESTART_COUNT; echo $$ > {d}/pid.$TORCHELASTIC_RESTART_COUNT.$RANK; \
         if [ $TORCHELASTIC_RESTART_COUNT = 0 ] && [ $RANK = 0 ]; then \
           while [ ! -s {d}/pid.0.1 ]; do sleep 0.01; done; kill -9 $$; fi; \
         if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then exec sleep 30; fi",
        d = dir.str()
    );
    let f = run(
        launch_sh(
            &[
                "--standalone",
                "--nproc-per-node",
                "2",
                "--max-restarts",
                "1",
                "--startup-window",
                "1ms",
            ],
            &script,
        ),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(0), "{f:?}");
    assert!(f.elapsed < Duration::from_secs(5), "{:?}", f.elapsed);
    assert_eq!(attempts(&f.stdout, 1), ["attempt 0", "attempt 1"]);
    // Round 0's sleeper was stopped before round 1 started.
    assert_eq!(
        survivors(&read_pids(dir.path(), "pid.0."), Duration::from_secs(2)),
        Vec::<i32>::new()
    );
}
