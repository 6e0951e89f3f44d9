//! `phalanx launch` when things go wrong: a killed worker, signals to the launcher, workers
//! that ignore SIGTERM, grandchildren. Every test checks that no process is left behind.

mod launch_util;

use std::time::Duration;

use launch_util::*;

const DEADLINE: Duration = Duration::from_secs(20);

#[test]
fn killed_worker_is_named_within_two_seconds_and_the_others_are_gone() {
    let dir = TempDir::new("kill9");
    // Every rank records its pid; rank 1 then kills itself, the others would sleep for 30 s.
    let script = format!(
        "echo $$ > {d}/pid.$RANK; \
         if [ $RANK = 1 ]; then while [ $(ls {d} | wc -l) -lt 3 ]; do sleep 0.01; done; \
         echo 'about to die' >&2; kill -9 $$; fi; exec sleep 30",
        d = dir.str()
    );
    let f = run(
        launch_sh(&["--standalone", "--nproc-per-node", "3"], &script),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(128 + 9), "{f:?}");
    assert!(f.elapsed < Duration::from_secs(3), "took {:?}", f.elapsed);
    assert!(
        f.stderr.contains("root cause: rank 1 (local_rank 1"),
        "{}",
        f.stderr
    );
    assert!(f.stderr.contains("signal 9 (SIGKILL)"));
    assert!(f.stderr.contains("about to die"));
    assert!(f.stderr.contains("stopped by launcher"));
    let pids = read_pids(dir.path(), "pid.");
    assert_eq!(pids.len(), 3);
    assert_eq!(survivors(&pids, Duration::from_secs(2)), Vec::<i32>::new());
}

#[test]
fn kill_detection_time_from_outside() {
    // The measure: SIGKILL a worker from outside; the launcher must exit naming it
    // within 2 s of the kill.
    let dir = TempDir::new("extkill");
    let script = format!("echo $$ > {}/pid.$RANK; exec sleep 30", dir.str());
    let r = start(launch_sh(
        &["--standalone", "--nproc-per-node", "2"],
        &script,
    ));
    wait_for_files(dir.path(), "pid.", 2, DEADLINE);
    let victim = std::fs::read_to_string(dir.path().join("pid.0"))
        .unwrap()
        .trim()
        .parse::<i32>()
        .unwrap();
    let killed_at = std::time::Instant::now();
    signal(victim, "KILL");
    let f = r.wait(DEADLINE);
    let detect = killed_at.elapsed();
    eprintln!("killed worker -> launcher exit: {detect:?}");
    assert!(detect < Duration::from_secs(2), "{detect:?}");
    assert_eq!(f.code(), Some(137));
    assert!(f.stderr.contains("root cause: rank 0"), "{}", f.stderr);
    assert_eq!(
        survivors(&read_pids(dir.path(), "pid."), Duration::from_secs(2)),
        Vec::<i32>::new()
    );
}

#[test]
fn sigterm_to_the_launcher_stops_the_workers() {
    let dir = TempDir::new("sigterm");
    let script = format!("echo $$ > {}/pid.$RANK; exec sleep 30", dir.str());
    let r = start(launch_sh(
        &["--standalone", "--nproc-per-node", "2"],
        &script,
    ));
    wait_for_files(dir.path(), "pid.", 2, DEADLINE);
    signal(r.pid(), "TERM");
    let f = r.wait(Duration::from_secs(5));
    assert_eq!(f.code(), Some(128 + 15), "{f:?}");
    assert!(f.stderr.contains("received SIGTERM"), "{}", f.stderr);
    assert_eq!(
        survivors(&read_pids(dir.path(), "pid."), Duration::from_secs(2)),
        Vec::<i32>::new()
    );
}

#[test]
fn sigint_is_forwarded_as_sigint() {
    let dir = TempDir::new("sigint");
    // The worker reports the signal it got, then exits.
    let script = format!(
        "trap 'echo got INT; exit 0' INT; echo $$ > {}/pid.$RANK; while :; do sleep 0.05; done",
        dir.str()
    );
    let r = start(launch_sh(&["--standalone"], &script));
    wait_for_files(dir.path(), "pid.", 1, DEADLINE);
    signal(r.pid(), "INT");
    let f = r.wait(Duration::from_secs(8));
    assert_eq!(f.code(), Some(128 + 2), "{f:?}");
    assert!(f.stdout.contains("[rank 0]: got INT"), "{f:?}");
}

#[test]
fn workers_that_ignore_sigterm_are_killed_after_the_grace_period() {
    let dir = TempDir::new("stubborn");
    let script = format!(
        "trap '' TERM; echo $$ > {d}/pid.$RANK; \
         if [ $RANK = 0 ]; then while [ $(ls {d} | wc -l) -lt 2 ]; do sleep 0.01; done; exit 5; fi; \
         exec sleep 30",
        d = dir.str()
    );
    let f = run(
        launch_sh(
            &[
                "--standalone",
                "--nproc-per-node",
                "2",
                "--grace-period",
                "0.5",
            ],
            &script,
        ),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(5), "{f:?}");
    assert!(f.elapsed < Duration::from_secs(4), "{:?}", f.elapsed);
    assert!(
        f.stderr
            .contains("signal 9 (SIGKILL) (stopped by launcher)"),
        "{}",
        f.stderr
    );
    assert_eq!(
        survivors(&read_pids(dir.path(), "pid."), Duration::from_secs(2)),
        Vec::<i32>::new()
    );
}

#[test]
fn grandchildren_die_with_their_worker_group() {
    let dir = TempDir::new("grandchild");
    // Rank 1 starts a background sleep (a grandchild of the launcher) and waits on it; rank 0 fails.
    let script = format!(
        "if [ $RANK = 1 ]; then sleep 30 & echo $! > {d}/gpid.1; wait; fi; \
         while [ ! -s {d}/gpid.1 ]; do sleep 0.01; done; exit 1",
        d = dir.str()
    );
    let f = run(
        launch_sh(&["--standalone", "--nproc-per-node", "2"], &script),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(1), "{f:?}");
    let pids = read_pids(dir.path(), "gpid.");
    assert_eq!(pids.len(), 1);
    assert_eq!(survivors(&pids, Duration::from_secs(2)), Vec::<i32>::new());
}

#[test]
fn killing_the_launcher_kills_the_workers() {
    // PR_SET_PDEATHSIG: even SIGKILL to the agent, which it cannot forward, takes its workers.
    let dir = TempDir::new("agentkill");
    let script = format!("echo $$ > {}/pid.$RANK; exec sleep 30", dir.str());
    let r = start(launch_sh(
        &["--standalone", "--nproc-per-node", "2"],
        &script,
    ));
    wait_for_files(dir.path(), "pid.", 2, DEADLINE);
    signal(r.pid(), "KILL");
    let _ = r.wait(Duration::from_secs(5));
    assert_eq!(
        survivors(&read_pids(dir.path(), "pid."), Duration::from_secs(2)),
        Vec::<i32>::new()
    );
}

/// Note [Stopped workers]: a worker stopped by SIGSTOP fails nothing by itself (programs
/// without phalanx's collectives, PyTorch's Gloo, would wait for it for their own 30 minutes);
/// the agent names it once it has been stopped for PHALANX_TIMEOUT.
#[test]
fn a_stopped_worker_is_named_after_phalanx_timeout() {
    let dir = TempDir::new("sigstop");
    let script = format!(
        "echo $$ > {d}/pid.$RANK; if [ $RANK = 1 ]; then echo 'stopping' >&2; kill -STOP $$; fi; \
         exec sleep 30",
        d = dir.str()
    );
    let mut cmd = launch_sh(&["--standalone", "--nproc-per-node", "2"], &script);
    cmd.env("PHALANX_TIMEOUT", "2s");
    let f = run(cmd, DEADLINE);
    assert_eq!(f.code(), Some(1), "{f:?}");
    assert!(
        f.stderr
            .lines()
            .any(|l| l.starts_with("root cause: rank 1 (local_rank 1")
                && l.contains("stopped (state T")),
        "{}",
        f.stderr
    );
    assert!(
        f.elapsed >= Duration::from_secs(2),
        "named before PHALANX_TIMEOUT: {:?}",
        f.elapsed
    );
    assert!(f.elapsed < Duration::from_secs(10), "took {:?}", f.elapsed);
    let pids = read_pids(dir.path(), "pid.");
    assert!(survivors(&pids, Duration::from_secs(2)).is_empty());
}
