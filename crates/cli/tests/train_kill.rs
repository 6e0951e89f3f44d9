//! Kills during real training: the killed rank is named and every process is gone within 2 s;
//! kills that land while checkpoints are being written never leave the newest committed
//! checkpoint unloadable.

mod launch_util;

use std::time::Duration;

use launch_util::{alive, kill_mid_run, phalanx, run, start, wait_for_workers, TempDir};

#[test]
fn sigkill_of_a_training_rank_is_named_and_everything_stops_within_two_seconds() {
    for victim_rank in [0u32, 2] {
        let mut cmd = phalanx();
        cmd.args([
            "train",
            "--standalone",
            "--nproc-per-node",
            "3",
            "--dataset",
            "synthetic:30000",
            "--epochs",
            "50",
        ]);
        let k = kill_mid_run(
            cmd,
            3,
            victim_rank,
            Duration::from_millis(1500),
            Duration::from_secs(30),
        );
        let f = &k.finished;
        assert!(
            k.took < Duration::from_secs(2),
            "took {:?}\n{}",
            k.took,
            f.stderr
        );
        assert_ne!(f.code(), Some(0));
        assert!(
            f.stderr
                .contains(&format!("root cause: rank {victim_rank}")),
            "{}",
            f.stderr
        );
        assert!(k.left.is_empty());
        assert!(!alive(k.victim));
    }
}

/// Fail-fast under `--tp 2 --pp 2`, as under DDP: a rank killed mid-step (its pipeline peers
/// wait on its activations, its tensor-parallel peer on its all-reduce) is named as the root
/// cause and every process is gone within 2 s. The same under interleaved 1F1B alone, whose
/// stages send each message when it is made and receive it when it is needed (Note
/// [Schedules as data]): its peer may be waiting in a send or in a receive.
#[test]
fn sigkill_of_a_rank_of_a_cut_model_is_named_and_everything_stops_within_two_seconds() {
    // (the cut's flags, the world, the rank killed)
    let layouts: [(&[&str], usize, u32); 2] = [
        (&["--depth", "2", "--tp", "2", "--pp", "2"], 4, 2),
        (
            &[
                "--depth",
                "4",
                "--pp",
                "2",
                "--pp-schedule",
                "interleaved",
                "--virtual-stages",
                "2",
            ],
            2,
            1,
        ),
    ];
    for (layout, world, victim_rank) in layouts {
        let mut cmd = phalanx();
        cmd.args(["train", "--standalone", "--model", "gpt"])
            .args(["--nproc-per-node", &world.to_string()])
            .args(layout)
            .args(["--max-steps", "1000000"]);
        let k = kill_mid_run(
            cmd,
            world,
            victim_rank,
            Duration::from_millis(3000),
            Duration::from_secs(30),
        );
        let f = &k.finished;
        assert!(
            k.took < Duration::from_secs(2),
            "{layout:?} took {:?}\n{}",
            k.took,
            f.stderr
        );
        assert_ne!(f.code(), Some(0));
        let cause = format!("root cause: rank {victim_rank}");
        assert!(f.stderr.contains(&cause), "{layout:?}: {}", f.stderr);
        assert!(k.left.is_empty());
    }
}

/// SIGUSR1 to one rank of a model cut across ranks (`--tp 2 --pp 2`): every rank stops after
/// the same step (the stop is agreed over the whole world, not over each data-parallel group),
/// every rank's piece is committed in one checkpoint, and the launcher exits 138.
#[test]
fn sigusr1_to_one_rank_of_a_cut_model_stops_every_rank_with_every_piece_committed() {
    let dir = TempDir::new("stop-pieces");
    let mut cmd = phalanx();
    cmd.args(["train", "--standalone", "--nproc-per-node", "4"])
        .args(["--model", "gpt", "--depth", "2", "--tp", "2", "--pp", "2"])
        .args(["--max-steps", "1000000", "--checkpoint-every", "1000000"])
        .args(["--checkpoint-dir", dir.str()]);
    let job = start(cmd);
    let procs = wait_for_workers(job.pid(), 4);
    // The handler is installed before the rendezvous; let a few steps run.
    std::thread::sleep(Duration::from_millis(4000));
    let victim = procs.iter().find(|(_, r)| *r == 3).unwrap().0;
    unsafe { libc::kill(victim, libc::SIGUSR1) };
    let f = job.wait(Duration::from_secs(120));
    assert_eq!(f.code(), Some(138), "{}", f.stderr);
    assert!(
        f.stderr.contains("all ranks stopped after step"),
        "{}",
        f.stderr
    );
    assert_eq!(committed(dir.str()).len(), 1, "{}", f.stderr);
    let pieces = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().contains(".shard-")
        })
        .count();
    assert_eq!(pieces, 4, "one piece per rank");
}

/// Names of the committed checkpoints (`step-N.json`, the commit record) in `dir`.
fn committed(dir: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("step-") && n.ends_with(".json"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn kills_during_checkpoint_writes_leave_a_loadable_checkpoint() {
    let dir = TempDir::new("ck-kill");
    // A checkpoint every step: most of the time is spent writing one, so kills land mid-write.
    let flags = [
        "train",
        "--standalone",
        "--dataset",
        "mnist5k",
        "--hidden",
        "512",
        "--epochs",
        "3",
        "--batch-size",
        "16",
        "--resume",
    ];
    for round in 0..4u64 {
        let mut cmd = phalanx();
        cmd.args(flags)
            .args(["--checkpoint-dir", dir.str(), "--checkpoint-every", "1"]);
        let job = start(cmd);
        let procs = wait_for_workers(job.pid(), 2);
        // Start timing at the first checkpoint this round commits (setup time varies with the
        // machine's load), then kill at a different point of the write cycle each round.
        let before = committed(dir.str());
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while committed(dir.str()) == before && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(30 + 37 * round));
        let rank0 = procs.iter().find(|(_, r)| *r == 0).unwrap().0;
        unsafe { libc::kill(rank0, libc::SIGKILL) };
        let f = job.wait(Duration::from_secs(30));
        assert_ne!(
            f.code(),
            Some(0),
            "round {round}: finished before the kill\n{}",
            f.stdout
        );
    }
    // Whatever the kills interrupted, the newest committed checkpoint loads and training
    // finishes from it.
    let mut cmd = phalanx();
    cmd.args(flags).args(["--checkpoint-dir", dir.str()]);
    let f = run(cmd, Duration::from_secs(300));
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    assert!(f.stdout.contains("resumed from step"), "{}", f.stdout);
}
