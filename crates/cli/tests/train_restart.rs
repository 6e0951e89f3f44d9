//! Elastic restart of real training: `--max-restarts 2` with a rank SIGKILLed mid-epoch; the job
//! resumes from its newest checkpoint and ends with the uninterrupted run's parameters, bitwise.

mod launch_util;

use std::time::{Duration, Instant};

use launch_util::{newest_step, phalanx, run, start, TempDir};

fn digests(stdout: &str) -> Vec<String> {
    let mut v: Vec<(String, String)> = stdout
        .lines()
        .filter(|l| l.contains("\"event\":\"summary\""))
        .map(|l| {
            let field = |k: &str| {
                let at = l.find(&format!("\"{k}\":")).unwrap() + k.len() + 3;
                l[at..]
                    .split([',', '}'])
                    .next()
                    .unwrap()
                    .trim_matches('"')
                    .to_string()
            };
            (field("rank"), field("param_digest"))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, d)| d).collect()
}

fn worker_pid(launcher: i32, rank: u32) -> Option<i32> {
    launch_util::workers(launcher)
        .into_iter()
        .find(|(_, r)| *r == rank)
        .map(|(p, _)| p)
}

#[test]
fn killed_rank_restarts_and_ends_bitwise_equal_to_the_uninterrupted_run() {
    let flags = [
        "--dataset",
        "mnist5k",
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--hidden",
        "64",
        "--seed",
        "5",
        "--json",
        "--standalone",
        "--checkpoint-every",
        "10",
        "--resume",
    ];
    let clean = TempDir::new("restart-clean");
    let mut cmd = phalanx();
    cmd.arg("train")
        .args(flags)
        .args(["--checkpoint-dir", clean.str()]);
    let want = run(cmd, Duration::from_secs(300));
    assert_eq!(want.code(), Some(0), "{}\n{}", want.stdout, want.stderr);
    let want = digests(&want.stdout);
    assert_eq!(want.len(), 2);

    let dir = TempDir::new("restart-killed");
    let mut cmd = phalanx();
    cmd.arg("train")
        .args(flags)
        .args(["--checkpoint-dir", dir.str(), "--max-restarts", "2"]);
    let job = start(cmd);
    // Kill rank 1 once a mid-run checkpoint exists (step 20 is inside the first epoch).
    let begin = Instant::now();
    while newest_step(dir.path()) < 20 {
        assert!(
            begin.elapsed() < Duration::from_secs(120),
            "no checkpoint appeared"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let victim = worker_pid(job.pid(), 1).expect("rank 1 is running");
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let got = job.wait(Duration::from_secs(300));
    assert_eq!(got.code(), Some(0), "{}\n{}", got.stdout, got.stderr);
    assert!(
        got.stdout.contains("resumed") || got.stderr.contains("restart"),
        "no restart seen:\n{}\n{}",
        got.stdout,
        got.stderr
    );
    assert_eq!(
        digests(&got.stdout),
        want,
        "the restarted job's parameters differ\n{}",
        got.stderr
    );
}
