//! `phalanx launch --fault-tolerance` (Note [FT generations] in phalanx-pg, Note [A regroup] in
//! phalanx-train): a SIGKILLed rank is replaced alone; the others go on from their in-memory
//! state without it until the replacement joins them and takes that state; no restart. Under
//! `--nnodes MIN:MAX` a node that arrives joins the running round the same way (Note
//! [Node admission] in phalanx-launch).

mod launch_util;

use std::time::{Duration, Instant};

use launch_util::{
    free_port, newest_step, phalanx, start, train_ok, train_summaries, wait_for_workers, workers,
    TempDir,
};

/// Three ranks on the vendored digits, momentum (optimizer state to hand over), a checkpoint
/// every 100 steps (the progress the test waits for; rank 0 writes them, a replacement too).
fn flags(dir: &TempDir) -> Vec<String> {
    [
        "--nproc-per-node",
        "3",
        "--epochs",
        "150",
        "--momentum",
        "0.9",
        "--fault-tolerance",
        "--checkpoint-every",
        "100",
        "--checkpoint-dir",
        dir.str(),
    ]
    .map(String::from)
    .to_vec()
}

/// Waits until a checkpoint at step `step` or later is committed: training is under way.
fn wait_for_step(dir: &TempDir, step: u64) {
    let begin = Instant::now();
    while newest_step(dir.path()) < step {
        assert!(
            begin.elapsed() < Duration::from_secs(60),
            "no checkpoint at step {step} after 60 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_killed_rank_is_replaced_and_the_others_never_restart() {
    let reference_dir = TempDir::new("ft-reference");
    let reference = train_ok(
        &flags(&reference_dir)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        Duration::from_secs(120),
    );
    let want = train_summaries(&reference.stdout);
    assert_eq!(want.len(), 3, "{}", reference.stdout);
    assert!(!reference.stdout.contains("regrouped"));

    // Rank 1, then rank 0 (the checkpoint writer and the usual source of state).
    for victim_rank in [1u32, 0] {
        let dir = TempDir::new("ft-kill");
        let mut cmd = phalanx();
        cmd.args(["train", "--standalone", "--json", "--max-restarts", "1"])
            .args(flags(&dir));
        let job = start(cmd);
        let procs = wait_for_workers(job.pid(), 3);
        wait_for_step(&dir, 500);
        let victim = procs.iter().find(|(_, r)| *r == victim_rank).unwrap().0;
        unsafe { libc::kill(victim, libc::SIGKILL) };
        let f = job.wait(Duration::from_secs(120));
        let what = format!(
            "victim {victim_rank}\nstdout:\n{}\nstderr:\n{}",
            f.stdout, f.stderr
        );
        assert_eq!(f.code(), Some(0), "{what}");
        assert!(
            f.stderr.contains(&format!(
                "rank {victim_rank} (local rank {victim_rank}, pid {victim}) ended with signal 9 (SIGKILL)"
            )) && f.stderr.contains("the other ranks go on without it"),
            "{what}"
        );
        // No round restarted: the survivors are the processes that started.
        assert!(!f.stderr.contains("starting attempt"), "{what}");
        // Without the dead rank (if its replacement was not ready first), the others formed
        // a group of the two survivors; in the end every rank is in one group of three.
        let shrunk: Vec<usize> = (0..3).filter(|&r| r != victim_rank as usize).collect();
        if f.stderr
            .contains("generation 1: process group re-formed with ranks [")
        {
            assert!(
                f.stderr
                    .contains(&format!("re-formed with ranks {shrunk:?} of 3"))
                    || f.stderr
                        .contains("generation 1: process group re-formed with ranks [0, 1, 2]"),
                "{what}"
            );
        }
        for r in 0..3 {
            assert!(
                f.stderr.contains(&format!("rank {r}: generation "))
                    && f.stderr
                        .lines()
                        .any(|l| l.contains(&format!("rank {r}: generation "))
                            && l.contains("re-formed with ranks [0, 1, 2] of 3")),
                "rank {r} did not rejoin a group of three: {what}"
            );
        }
        assert!(f.stderr.contains("this replacement joined"), "{what}");
        assert!(f.stdout.contains("\"event\":\"regrouped\""), "{what}");
        // Replicas identical, and the run as good as the undisturbed one.
        let got = train_summaries(&f.stdout);
        assert_eq!(got.len(), 3, "{what}");
        assert!(
            got.iter().all(|s| s.2 == got[0].2),
            "replicas differ: {what}"
        );
        assert!(
            got[0].1 >= want[0].1 - 0.02,
            "accuracy {} against {} undisturbed: {what}",
            got[0].1,
            want[0].1
        );
    }
}

#[test]
fn a_second_death_past_the_restart_budget_ends_the_job_naming_it() {
    let dir = TempDir::new("ft-budget");
    let mut cmd = phalanx();
    // No start-up window: the second death must count, however soon after the round began.
    cmd.args(["train", "--standalone", "--json", "--max-restarts", "1"])
        .args(["--startup-window", "0.001"])
        .args(flags(&dir));
    let job = start(cmd);
    let pid = job.pid();
    wait_for_workers(pid, 3);
    wait_for_step(&dir, 300);
    let first = launch_util::workers(pid)
        .into_iter()
        .find(|(_, r)| *r == 2)
        .unwrap()
        .0;
    unsafe { libc::kill(first, libc::SIGKILL) };
    // The replacement (a new pid for rank 2) trains; then it is killed too.
    let begin = Instant::now();
    let second = loop {
        let w = launch_util::workers(pid);
        if let Some(&(p, _)) = w.iter().find(|(p, r)| *r == 2 && *p != first) {
            break p;
        }
        assert!(
            begin.elapsed() < Duration::from_secs(30),
            "no replacement: {w:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let step = newest_step(dir.path());
    wait_for_step(&dir, step + 200);
    unsafe { libc::kill(second, libc::SIGKILL) };
    let f = job.wait(Duration::from_secs(60));
    let what = format!("stdout:\n{}\nstderr:\n{}", f.stdout, f.stderr);
    // The budget is spent: the round ends as without fault tolerance, naming the rank.
    assert_eq!(
        f.code(),
        Some(i32::from(phalanx_launch::EXIT_RESTARTS_EXHAUSTED)),
        "{what}"
    );
    assert!(f.stderr.contains("root cause: rank 2"), "{what}");
    assert!(f.stderr.contains("failed after 1 restarts"), "{what}");
}

#[test]
fn fault_tolerance_without_phalanx_launch_is_refused_with_a_sentence() {
    // A worker that looks started by torchrun (RANK set) but was told to be fault tolerant.
    let mut cmd = phalanx();
    cmd.args(["train", "--epochs", "1"])
        .env("PHALANX_FAULT_TOLERANCE", "1")
        .env("RANK", "0")
        .env("WORLD_SIZE", "1")
        .env("LOCAL_RANK", "0")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", launch_util::free_port().to_string());
    let f = launch_util::run(cmd, Duration::from_secs(30));
    assert_ne!(f.code(), Some(0));
    assert!(
        f.stderr
            .contains("fault tolerance needs phalanx launch's store"),
        "{}",
        f.stderr
    );
}

#[test]
fn a_node_that_arrives_joins_the_running_round_and_nobody_restarts() {
    let dir = TempDir::new("ft-admit");
    let port = free_port().to_string();
    // Two agents on this machine: node 0 with one rank, node 1 with two.
    let node = |g: &str, nproc: &str| {
        let mut c = phalanx();
        c.env("PHALANX_TOKEN", "ab".repeat(16))
            .args(["train", "--json", "--nnodes", "1:2", "--node-rank", g])
            .args(["--nproc-per-node", nproc, "--master-addr", "127.0.0.1"])
            .args(["--master-port", &port, "--rdzv-last-call", "0.01"])
            .args(flags(&dir).iter().skip(2));
        c
    };
    let n0 = start(node("0", "1"));
    wait_for_step(&dir, 200);
    let n1 = start(node("1", "2"));
    let (f1, f0) = (
        n1.wait(Duration::from_secs(120)),
        n0.wait(Duration::from_secs(120)),
    );
    let what = format!(
        "node 0:\n{}\n{}\nnode 1:\n{}\n{}",
        f0.stdout, f0.stderr, f1.stdout, f1.stderr
    );
    assert_eq!((f0.code(), f1.code()), (Some(0), Some(0)), "{what}");
    assert!(
        f0.stderr.contains("node 1 (") && f0.stderr.contains("joins round 0 without a restart"),
        "{what}"
    );
    assert!(
        f1.stderr
            .contains("admitted into the running round (nodes [0, 1]); this node's ranks 1..3"),
        "{what}"
    );
    // One round from start to end.
    for f in [&f0, &f1] {
        assert!(
            !f.stderr.contains("round 1") && !f.stderr.contains("starting attempt"),
            "{what}"
        );
    }
    // Both of node 1's ranks took the state from the running rank and trained with it.
    for r in [1, 2] {
        assert!(
            f1.stderr
                .lines()
                .any(|l| l.contains(&format!("rank {r}: generation "))
                    && l.contains("this replacement joined")),
            "rank {r} did not join: {what}"
        );
    }
    assert!(
        f0.stderr
            .lines()
            .any(|l| l.contains("rank 0: generation ") && l.contains("ranks [0, 1, 2] of 3")),
        "{what}"
    );
    let mut s = train_summaries(&f0.stdout);
    s.extend(train_summaries(&f1.stdout));
    s.sort_by_key(|x| x.0);
    assert_eq!(
        s.iter().map(|x| x.0).collect::<Vec<_>>(),
        [0, 1, 2],
        "{what}"
    );
    assert!(s.iter().all(|x| x.2 == s[0].2), "replicas differ: {s:?}");
}

/// The GPT on 4 ranks, two replicas of `cut` (`--tp 2` or `--pp 2`), 1,500 steps, a
/// checkpoint every 100 (the progress the drill waits for).
fn cut_flags(dir: &TempDir, cut: &[&str]) -> Vec<String> {
    [
        "--nproc-per-node",
        "4",
        "--model",
        "gpt",
        "--hidden",
        "32",
        "--depth",
        "2",
        "--heads",
        "2",
        "--seq-len",
        "16",
        "--batch-size",
        "8",
        "--max-steps",
        "1500",
        "--test-fraction",
        "0.002",
        "--momentum",
        "0.9",
        "--fault-tolerance",
        "--checkpoint-every",
        "100",
        "--checkpoint-dir",
        dir.str(),
    ]
    .iter()
    .chain(cut)
    .map(|s| s.to_string())
    .collect()
}

/// Each summary's `(param_digest, train_loss, test_loss)`, by rank.
fn cut_summaries(stdout: &str) -> Vec<(String, f64, f64)> {
    let mut all: Vec<(u64, (String, f64, f64))> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|j| j["event"] == "summary")
        .map(|j| {
            let digest = j["param_digest"].as_str().unwrap().to_string();
            let loss = |k: &str| j[k].as_f64().unwrap();
            (
                j["rank"].as_u64().unwrap(),
                (digest, loss("train_loss"), loss("test_loss")),
            )
        })
        .collect();
    all.sort_by_key(|(rank, _)| *rank);
    all.into_iter().map(|(_, s)| s).collect()
}

/// Note [Replicas that leave and join] in phalanx-train: under `--tp` and `--pp` a rank's death
/// takes its replica out. Its other rank leaves too and the other replica trains alone (the
/// replacement is held back 1 s, so that it does); once the replacement is ready the replica
/// joins again and takes every piece from its data-parallel peer. Nobody restarts, every rank
/// ends on one model and reports one training loss, and the run ends near the undisturbed one.
#[test]
fn a_model_replica_that_loses_a_rank_leaves_and_joins_again_from_its_peer() {
    let reference_dir = TempDir::new("ft-cut-reference");
    let flags = cut_flags(&reference_dir, &["--tp", "2"]);
    let reference = train_ok(
        &flags.iter().map(String::as_str).collect::<Vec<_>>(),
        Duration::from_secs(300),
    );
    let want = cut_summaries(&reference.stdout);
    assert_eq!(want.len(), 4, "{}", reference.stdout);
    // Rank 1: the second rank of the first replica under --tp 2; rank 2: the first stage of
    // the second replica under --pp 2.
    for (cut, victim_rank, partner, others) in
        [("--tp", 1u32, 0u32, [2, 3]), ("--pp", 2, 3, [0, 1])]
    {
        let dir = TempDir::new("ft-cut");
        let mut cmd = phalanx();
        cmd.args(["train", "--standalone", "--json", "--max-restarts", "1"])
            .args(cut_flags(&dir, &[cut, "2"]));
        let job = start(cmd);
        let procs = wait_for_workers(job.pid(), 4);
        wait_for_step(&dir, 200);
        let victim = procs.iter().find(|(_, r)| *r == victim_rank).unwrap().0;
        unsafe { libc::kill(victim, libc::SIGKILL) };
        // The replacement is held back, so that the other replica goes on alone first.
        let begin = Instant::now();
        let replacement = loop {
            let found = workers(job.pid())
                .into_iter()
                .find(|&(pid, r)| r == victim_rank && pid != victim);
            if let Some((pid, _)) = found {
                break pid;
            }
            assert!(begin.elapsed() < Duration::from_secs(30), "no replacement");
            std::thread::sleep(Duration::from_millis(2));
        };
        unsafe { libc::kill(replacement, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_secs(1));
        unsafe { libc::kill(replacement, libc::SIGCONT) };
        let f = job.wait(Duration::from_secs(300));
        let what = format!("{cut} 2\nstdout:\n{}\nstderr:\n{}", f.stdout, f.stderr);
        assert_eq!(f.code(), Some(0), "{what}");
        assert!(!f.stderr.contains("starting attempt"), "{what}");
        // The dead rank's partner left its replica and joined again; the other replica went
        // on alone; in the end every rank is in one group of four.
        let n = 2 * (partner / 2);
        assert!(
            f.stderr.contains(&format!(
                "slots {n}..{} train together and one is gone; this rank joins again",
                n + 2
            )),
            "{what}"
        );
        for r in others {
            assert!(
                f.stderr.contains(&format!("rank {r}: generation "))
                    && f.stderr
                        .contains(&format!("re-formed with ranks {others:?} of 4")),
                "replica {others:?} did not go on alone: {what}"
            );
        }
        for r in 0..4 {
            assert!(
                f.stderr
                    .lines()
                    .any(|l| l.contains(&format!("rank {r}: generation "))
                        && l.contains("re-formed with ranks [0, 1, 2, 3] of 4")),
                "rank {r} did not rejoin a group of four: {what}"
            );
        }
        let got = cut_summaries(&f.stdout);
        assert_eq!(got.len(), 4, "{what}");
        assert!(
            got.iter().all(|s| s.0 == got[0].0 && s.1 == got[0].1),
            "the ranks end on different models or losses: {what}"
        );
        // The run trained on fewer samples while one replica was away: near the undisturbed
        // run, not equal to it.
        assert!(
            (got[0].2 - want[0].2).abs() < 0.1 * want[0].2,
            "validation loss {} against {} undisturbed: {what}",
            got[0].2,
            want[0].2
        );
    }
}

/// A cut model's fault tolerance needs a peer replica, and whole pieces to take from it.
#[test]
fn fault_tolerance_under_a_cut_model_names_what_it_needs() {
    for (flags, words) in [
        (
            &["--nproc-per-node", "2", "--tp", "2"][..],
            "at least two replicas of tp × pp = 2 ranks; it has 2 rank(s)",
        ),
        (
            &["--nproc-per-node", "4", "--pp", "2", "--sharding", "hybrid"][..],
            "--fault-tolerance with --pp 2 and --sharding hybrid",
        ),
    ] {
        let mut cmd = phalanx();
        cmd.args([
            "train",
            "--standalone",
            "--model",
            "gpt",
            "--fault-tolerance",
        ])
        .args(flags);
        let f = launch_util::run(cmd, Duration::from_secs(120));
        assert_ne!(f.code(), Some(0), "{flags:?}");
        assert!(f.stderr.contains(words), "{flags:?}: {}", f.stderr);
    }
}
