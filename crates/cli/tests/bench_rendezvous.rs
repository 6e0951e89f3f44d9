//! `phalanx bench rendezvous` through the real binary: JSON output, and the store traffic per
//! rank stays constant as the world grows (Note [Leader gather] in phalanx-pg's bootstrap/mod.rs).

mod launch_util;

use std::time::Duration;

use launch_util::{phalanx, run};

/// `cmd` (this crate's phalanx binary and its arguments) started by a shell that first lowers
/// its descriptor limit to `n`, from a clean environment.
fn under_open_files(n: usize, cmd: &std::process::Command) -> std::process::Command {
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut sh = std::process::Command::new("sh");
    phalanx_testing::process::clean_env(&mut sh)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .arg("-c")
        .arg(format!(
            "ulimit -n {n} && exec {} {}",
            env!("CARGO_BIN_EXE_phalanx"),
            args.join(" ")
        ));
    sh
}

/// Requests per rank of one repetition, and how many child processes held the ranks; with
/// `open_files`, under that `ulimit -n`.
fn requests_per_rank(ranks: usize, open_files: Option<usize>) -> (f64, usize) {
    let mut cmd = phalanx();
    cmd.args(["bench", "rendezvous", "--iters", "2", "--json", "--ranks"]);
    cmd.arg(ranks.to_string());
    if let Some(n) = open_files {
        cmd = under_open_files(n, &cmd);
    }
    let f = run(cmd, Duration::from_secs(60));
    assert_eq!(
        f.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        f.stdout,
        f.stderr
    );
    let line = f.stdout.trim();
    assert!(
        line.starts_with('{') && line.contains(&format!("\"ranks\":{ranks},")),
        "{line}"
    );
    let per_rank = line
        .split("\"requests_per_rank\":")
        .nth(1)
        .and_then(|v| v.trim_end_matches('}').parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no requests_per_rank in {line}"));
    let processes = line
        .split("\"child_processes\":")
        .nth(1)
        .and_then(|v| v.split(',').next()?.parse::<usize>().ok())
        .unwrap_or_else(|| panic!("no child_processes in {line}"));
    (per_rank, processes)
}

#[test]
fn store_requests_per_rank_do_not_grow_with_the_world() {
    let (small, _) = requests_per_rank(8, None);
    let (large, processes) = requests_per_rank(256, None);
    assert_eq!(processes, 0);
    // 4 per rank (a set and a get that waits, twice) plus rank 0's four, spread over the world.
    assert!(
        small <= 4.5 && large <= 4.1,
        "{small} and {large} requests per rank"
    );
}

/// Note [Ranks in several processes]: when the ranks' connections and the store's do not fit
/// one process's descriptors, children of the bench hold the ranks, and the figures are alike.
#[test]
fn ranks_past_the_descriptor_limit_run_in_child_processes() {
    // 300 ranks: the store's 300 connections fit 450 descriptors, the ranks' do not as well,
    // so one child holds them.
    let (per_rank, processes) = requests_per_rank(300, Some(450));
    assert!(per_rank <= 4.1, "{per_rank} requests per rank");
    assert_eq!(processes, 1);
    let mut cmd = phalanx();
    cmd.args(["bench", "rendezvous", "--ranks", "300", "--iters", "1"]);
    let cmd = under_open_files(200, &cmd);
    let f = run(cmd, Duration::from_secs(30));
    assert_eq!(f.code(), Some(1), "{}", f.stderr);
    assert!(
        f.stderr.contains("--ranks 300") && f.stderr.contains("ulimit -n"),
        "{}",
        f.stderr
    );
}

#[test]
fn bad_rank_count_is_named() {
    let mut cmd = phalanx();
    cmd.args(["bench", "rendezvous", "--ranks", "0"]);
    let f = run(cmd, Duration::from_secs(30));
    assert_eq!(f.code(), Some(1), "{}", f.stderr);
    assert!(f.stderr.contains("--ranks 0"), "{}", f.stderr);
}
