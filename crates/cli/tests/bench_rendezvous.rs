//! `phalanx bench rendezvous` through the real binary: JSON output, and the store traffic per
//! rank stays constant as the world grows (Note [Leader gather] in phalanx-pg's bootstrap.rs).

mod launch_util;

use std::time::Duration;

use launch_util::{phalanx, run};

fn requests_per_rank(ranks: usize) -> f64 {
    let mut cmd = phalanx();
    cmd.args(["bench", "rendezvous", "--iters", "1", "--json", "--ranks"]);
    cmd.arg(ranks.to_string());
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
    per_rank
}

#[test]
fn store_requests_per_rank_do_not_grow_with_the_world() {
    let small = requests_per_rank(8);
    let large = requests_per_rank(256);
    // 6 per rank (set, wait, get; add, wait, get) plus rank 0's three, spread over the world.
    assert!(
        small <= 6.5 && large <= 6.1,
        "{small} and {large} requests per rank"
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
