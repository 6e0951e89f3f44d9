//! Deterministic fuzzing of command-line parsing: `--sizes` lists (the `bench allreduce`
//! parser, compiled in from the CLI's source) and every value-taking `phalanx launch` flag
//! through clap and `LaunchArgs::validate`. 100,000+ inputs each; nothing may panic, and what
//! is accepted is within bounds.

#[allow(dead_code)]
#[path = "../src/cmd/sizes.rs"]
mod sizes;

use clap::Parser;
use phalanx_launch::LaunchArgs;
use phalanx_testing::fuzz::{fuzz, mutate, Rng, TrackingAlloc};

#[global_allocator]
static ALLOC: TrackingAlloc = TrackingAlloc::new();

#[test]
fn size_lists_never_panic_and_stay_bounded() {
    let seeds: Vec<Vec<u8>> = [
        "4K",
        "4K..256M",
        "4K..1G:4",
        "1,2,3",
        "0",
        "1..18446744073709551615:3",
        "18446744073709551615",
        "17179869184G",
        "4KiB,64MB",
        "..",
        "1..2:1",
        "1..2:0",
        ":",
        ",,,",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let mut ok = 0usize;
    fuzz("--sizes", 31, &seeds, 150_000, 48, |input| {
        let s = String::from_utf8_lossy(input);
        if let Ok(v) = sizes::parse_sizes(&s) {
            // A range yields at most 64 sizes (factor >= 2), so the list stays tiny.
            let parts = s.split(',').count();
            assert!(
                !v.is_empty() && v.len() <= 65 * parts,
                "{s:?} -> {} sizes",
                v.len()
            );
            ok += 1;
        }
        if let Ok(n) = sizes::parse_size(&s) {
            let _ = sizes::format_size(n);
        }
    });
    assert!(ok > 1000, "only {ok} accepted");
    assert!(ALLOC.largest() < 1 << 20, "{} bytes", ALLOC.largest());
}

#[derive(Parser, Debug)]
struct Launch {
    #[command(flatten)]
    launch: LaunchArgs,
}

const FLAGS: &[(&str, &[&str])] = &[
    ("--nproc-per-node", &["2", "0", "4294967296"]),
    ("--nnodes", &["2", "2:2", "1:4", "0", ":", "3:"]),
    ("--node-rank", &["0", "7", "-1"]),
    ("--master-addr", &["127.0.0.1", "::1", "", "host name"]),
    ("--master-port", &["29500", "0", "65536"]),
    ("--standalone", &["true", "0", "yes", "maybe"]),
    ("--max-restarts", &["3", "-1"]),
    ("--monitor-interval", &["0.1", "100ms", "0", "1e400", "nan"]),
    ("--grace-period", &["5", "5s", "1h", "-5"]),
    ("--startup-window", &["1", "0.5", "inf"]),
    ("--tee", &["3", "0:1,1:2", "9", "0:", ":3", "1:1,1:2"]),
    ("--local-ranks-filter", &["0", "0,2", ",", "a"]),
    ("--run-id", &["abc", ""]),
];

#[test]
fn launch_flags_never_panic() {
    let mut rng = Rng::new(32);
    let mut accepted = 0usize;
    for case in 0..100_000 {
        let mut argv = vec!["launch".to_string()];
        for _ in 0..1 + rng.below(3) {
            let (flag, values) = FLAGS[rng.below(FLAGS.len())];
            let mut v = values[rng.below(values.len())].as_bytes().to_vec();
            if rng.one_in(2) {
                mutate(&mut rng, &mut v, 24);
            }
            argv.push(flag.to_string());
            argv.push(String::from_utf8_lossy(&v).into_owned());
        }
        let parsed = std::panic::catch_unwind(|| {
            Launch::try_parse_from(&argv).map(|l| {
                let _ = l.launch.validate();
                let _ = l.launch.shows(0);
                let _ = l.launch.logged_streams(1);
            })
        });
        match parsed {
            Ok(Ok(())) => accepted += 1,
            Ok(Err(e)) => {
                let _ = e.to_string();
            }
            Err(_) => panic!("case {case}: parsing {argv:?} panicked"),
        }
    }
    assert!(accepted > 1000, "only {accepted} accepted");
}
