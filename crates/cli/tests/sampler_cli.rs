//! `phalanx sampler` run as a real process.

use std::process::{Command, Output};

fn phalanx(args: &[&str]) -> Output {
    phalanx_testing::process::clean_env(&mut Command::new(env!("CARGO_BIN_EXE_phalanx")))
        .arg("sampler")
        .args(args)
        .output()
        .expect("phalanx runs")
}

fn stdout(args: &[&str]) -> String {
    let out = phalanx(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn prints_pytorchs_indices() {
    // PyTorch: randperm(10) after manual_seed(0) is [4,1,7,5,3,9,0,8,6,2], padded with [4,1].
    assert_eq!(
        stdout(&["--len", "10", "--replicas", "4", "--rank", "1"]),
        "1,9,2\n"
    );
    assert_eq!(
        stdout(&["--len", "10", "--replicas", "1", "--rank", "0"]),
        "4,1,7,5,3,9,0,8,6,2\n"
    );
    assert_eq!(
        stdout(&[
            "--len",
            "10",
            "--replicas",
            "4",
            "--rank",
            "3",
            "--no-shuffle",
            "--drop-last"
        ]),
        "3,7\n"
    );
}

#[test]
fn matches_the_library_for_seed_and_epoch() {
    let s = phalanx_data::DistributedSampler::new(1000, 3, 2)
        .unwrap()
        .with_seed((1 << 32) + 7);
    let want: Vec<String> = s.indices(5).iter().map(|i| i.to_string()).collect();
    let got = stdout(&[
        "--len",
        "1000",
        "--replicas",
        "3",
        "--rank",
        "2",
        "--seed",
        "4294967303",
        "--epoch",
        "5",
    ]);
    assert_eq!(got, want.join(",") + "\n");
}

#[test]
fn exact_shard() {
    assert_eq!(
        stdout(&["--len", "10", "--replicas", "4", "--rank", "3", "--exact"]),
        "8..10\n"
    );
}

#[test]
fn invalid_arguments_fail_with_a_message() {
    for args in [
        &["--len", "10", "--replicas", "2", "--rank", "2"][..],
        &["--len", "10", "--replicas", "0", "--rank", "0"],
        &[
            "--len",
            "3",
            "--replicas",
            "4",
            "--rank",
            "0",
            "--drop-last",
        ],
    ] {
        let out = phalanx(args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("DistributedSampler"), "{args:?}: {err}");
    }
}
