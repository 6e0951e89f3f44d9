//! Deterministic fuzzing of environment parsing: `DistEnv::from_lookup` over random
//! combinations of launcher, MPI and Slurm variables with random and mutated values, the
//! Slurm helpers, and `phalanx_core::parse_duration` (PHALANX_TIMEOUT). 100,000+ inputs each;
//! nothing may panic, and whatever is accepted must be a consistent placement.

use std::collections::HashMap;

use phalanx_core::parse_duration;
use phalanx_pg::{first_host, tasks_on_node, DistEnv};
use phalanx_testing::fuzz::{fuzz, mutate, Rng, TrackingAlloc};

#[global_allocator]
static ALLOC: TrackingAlloc = TrackingAlloc::new();

const CASES: usize = 200_000;

const VARS: &[&str] = &[
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_COMM_WORLD_NODE_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
];

const VALUES: &[&str] = &[
    "0",
    "1",
    "3",
    "4",
    "65535",
    "65536",
    "29500",
    "-1",
    " 2 ",
    "",
    "18446744073709551615",
    "18446744073709551616",
    "4294967296",
    "2(x3),1",
    "1(x18446744073709551615),1(x1)",
    "node[01-04,07],gpu5",
    "node[",
    "a]b[",
    "10.0.0.1",
    "::1",
    "héllo",
];

#[test]
fn dist_env_never_panics_and_accepts_only_consistent_placements() {
    let mut rng = Rng::new(21);
    let mut accepted = 0usize;
    for case in 0..CASES {
        let mut env: HashMap<&str, String> = HashMap::new();
        // Mostly one convention's variables, sometimes a mix of all.
        let pool: &[&str] = match rng.below(5) {
            0 => &VARS[..7],
            1 => &VARS[5..12],
            2 => &VARS[12..16],
            3 => &VARS[16..],
            _ => VARS,
        };
        for _ in 0..rng.below(pool.len() + 1) {
            let name = pool[rng.below(pool.len())];
            let mut v = VALUES[rng.below(VALUES.len())].as_bytes().to_vec();
            if rng.one_in(2) {
                mutate(&mut rng, &mut v, 40);
            }
            env.insert(name, String::from_utf8_lossy(&v).into_owned());
        }
        if matches!(rng.below(3), 0) {
            // Keep a slice of fuzzed numbers coherent enough to reach the deeper checks.
            env.insert("RANK", rng.below(8).to_string());
            env.insert("WORLD_SIZE", rng.below(8).to_string());
        }
        let r = std::panic::catch_unwind(|| DistEnv::from_lookup(&|k| env.get(k).cloned()));
        match r {
            Ok(Ok(e)) => {
                accepted += 1;
                assert!(e.world_size >= 1, "{e:?} from {env:?}");
                assert!(e.rank < e.world_size, "{e:?} from {env:?}");
                assert!(e.local_rank < e.local_world_size, "{e:?} from {env:?}");
                assert!(e.master_port > 0 && !e.master_addr.is_empty(), "{e:?}");
            }
            Ok(Err(err)) => assert!(!err.to_string().is_empty()),
            Err(_) => panic!("case {case}: from_lookup panicked on {env:?}"),
        }
    }
    assert!(accepted > CASES / 50, "only {accepted} accepted");
    assert!(ALLOC.largest() < 1 << 20, "{} bytes", ALLOC.largest());
}

#[test]
fn slurm_helpers_never_panic() {
    let seeds: Vec<Vec<u8>> = VALUES.iter().map(|v| v.as_bytes().to_vec()).collect();
    let mut rng = Rng::new(22);
    fuzz("slurm helpers", 23, &seeds, CASES, 64, |input| {
        let s = String::from_utf8_lossy(input);
        let node = match rng.below(3) {
            0 => rng.below(8),
            1 => usize::MAX - rng.below(2),
            _ => rng.next_u64() as usize,
        };
        if let Some(n) = tasks_on_node(&s, node) {
            let _ = n;
        }
        if let Some(h) = first_host(&s) {
            assert!(!h.is_empty() || s.trim().starts_with('['), "{s:?} -> {h:?}");
        }
    });
}

#[test]
fn durations_never_panic_and_are_positive_and_bounded() {
    let seeds: Vec<Vec<u8>> = [
        "300",
        "300s",
        "5m",
        "1h",
        "250ms",
        "1.5s",
        "0",
        "-1",
        "1e308",
        "nan",
        "inf",
        ".",
        "1..2s",
        "99999999999999999999h",
        "5 m",
        "0.0000000001ms",
    ]
    .iter()
    .map(|v| v.as_bytes().to_vec())
    .collect();
    let mut ok = 0usize;
    fuzz("parse_duration", 24, &seeds, CASES, 32, |input| {
        let s = String::from_utf8_lossy(input);
        if let Ok(d) = parse_duration(&s) {
            assert!(!d.is_zero(), "{s:?} -> {d:?}");
            assert!(d.as_secs() <= 1_000_000_000, "{s:?} -> {d:?}");
            ok += 1;
        }
    });
    assert!(ok > 1000, "only {ok} parsed");
}
