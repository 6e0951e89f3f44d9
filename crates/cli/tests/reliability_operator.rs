//! Operator errors through the real binary: each ends, within its deadline, in one sentence
//! that names what is wrong (a port's holder, the address tried, both WORLD_SIZEs, the rank
//! claimed twice, the closest variable name, the interfaces there are) — never a panic or a
//! stack trace.

mod launch_util;

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use launch_util::{free_port, launch_sh, phalanx, rank_lines, run, start, Finished};

/// The process ended on an error sentence, not a panic.
fn no_panic(f: &Finished) {
    for text in [&f.stdout, &f.stderr] {
        assert!(
            !text.contains("panicked") && !text.contains("stack backtrace"),
            "a panic instead of an error sentence:\n{text}"
        );
    }
}

/// A worker-side `phalanx bench allreduce` started by hand with torchrun's variables.
fn worker(rank: u32, world: u32, port: u16, timeout: &str) -> Command {
    let mut c = phalanx();
    c.env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("PHALANX_TIMEOUT", timeout)
        .args(["bench", "allreduce", "--iters", "3", "--sizes", "4K"]);
    c
}

#[test]
fn port_already_in_use_names_the_process_that_holds_it() {
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let f = run(
        launch_sh(&["--master-port", &port.to_string()], "true"),
        Duration::from_secs(20),
    );
    no_panic(&f);
    assert_ne!(f.code(), Some(0));
    let me = std::process::id();
    assert!(
        f.stderr
            .contains(&format!("port {port} is held by pid {me}")),
        "the holder (this test, pid {me}) is not named:\n{}",
        f.stderr
    );
    assert!(f.stderr.contains("--master-port"), "{}", f.stderr);
    assert_eq!(
        f.stderr.trim().lines().count(),
        1,
        "one sentence:\n{}",
        f.stderr
    );
}

#[test]
fn unreachable_master_names_the_address_within_the_timeout() {
    let port = free_port(); // nothing listens there
    let f = run(worker(1, 2, port, "2s"), Duration::from_secs(20));
    no_panic(&f);
    assert_ne!(f.code(), Some(0));
    assert!(
        f.elapsed < Duration::from_millis(3500),
        "took {:?} with PHALANX_TIMEOUT=2s",
        f.elapsed
    );
    let last = f.stderr.trim().lines().last().unwrap_or("");
    assert!(
        last.contains(&format!("127.0.0.1:{port}")) && last.contains("rendezvous store"),
        "the last line does not name the address tried: {last:?}"
    );
}

#[test]
fn inconsistent_world_size_names_both_values() {
    let port = free_port();
    let r0 = start(worker(0, 2, port, "3s"));
    std::thread::sleep(Duration::from_millis(200));
    let r1 = run(worker(1, 3, port, "3s"), Duration::from_secs(20));
    let r0 = r0.wait(Duration::from_secs(20));
    no_panic(&r0);
    no_panic(&r1);
    assert_ne!(r1.code(), Some(0));
    assert_ne!(r0.code(), Some(0));
    assert!(
        r1.elapsed < Duration::from_secs(2),
        "the rank with the odd WORLD_SIZE fails at once: {:?}",
        r1.elapsed
    );
    assert!(
        r1.stderr.contains("WORLD_SIZE=2") && r1.stderr.contains("ours is 3"),
        "{}",
        r1.stderr
    );
    // Rank 0 logs the refused peer with both values, then names the rank that never joined.
    assert!(
        r0.stderr.contains("WORLD_SIZE=3, ours is 2"),
        "{}",
        r0.stderr
    );
    assert!(
        r0.stderr.contains("no connection from rank(s) [1]"),
        "{}",
        r0.stderr
    );
}

#[test]
fn inconsistent_nnodes_is_named_by_every_agent() {
    let port = free_port().to_string();
    let agent = |nnodes: &str, node_rank: &str| {
        let mut c = launch_sh(
            &[
                "--nnodes",
                nnodes,
                "--node-rank",
                node_rank,
                "--master-port",
                &port,
            ],
            "true",
        );
        c.env("PHALANX_TOKEN", "00112233445566778899aabbccddeeff")
            .env("PHALANX_TIMEOUT", "10s");
        c
    };
    let n0 = start(agent("2", "0"));
    std::thread::sleep(Duration::from_millis(300));
    let n1 = run(agent("3", "1"), Duration::from_secs(20));
    let n0 = n0.wait(Duration::from_secs(20));
    for (f, who) in [(&n0, "node 0"), (&n1, "node 1")] {
        no_panic(f);
        assert_ne!(f.code(), Some(0), "{who}");
        assert!(
            f.elapsed < Duration::from_secs(5),
            "{who} waited {:?} instead of failing at once",
            f.elapsed
        );
        assert!(
            f.stderr.contains("--nnodes 3") && f.stderr.contains("--nnodes 2"),
            "{who} does not name both values:\n{}",
            f.stderr
        );
    }
}

#[test]
fn two_ranks_claiming_the_same_rank_are_named() {
    let port = free_port();
    let r0 = start(worker(0, 3, port, "5s"));
    std::thread::sleep(Duration::from_millis(200));
    let a = start(worker(1, 3, port, "5s"));
    let b = start(worker(1, 3, port, "5s"));
    let r0 = r0.wait(Duration::from_secs(30));
    let (a, b) = (
        a.wait(Duration::from_secs(30)),
        b.wait(Duration::from_secs(30)),
    );
    for f in [&r0, &a, &b] {
        no_panic(f);
        assert_ne!(f.code(), Some(0));
    }
    let all = format!("{}{}{}", r0.stderr, a.stderr, b.stderr);
    assert!(
        all.contains("claim rank 1") || all.contains("rank 1") && all.contains("twice"),
        "the duplicate rank is not named:\n{all}"
    );
}

#[test]
fn unknown_phalanx_variable_warns_with_the_closest_name_in_every_worker() {
    let mut cmd = phalanx();
    cmd.env("PHALANX_TIMOUT", "30s").args([
        "bench",
        "allreduce",
        "--nproc-per-node",
        "2",
        "--standalone",
        "--iters",
        "3",
        "--sizes",
        "4K",
    ]);
    let f = run(cmd, Duration::from_secs(30));
    no_panic(&f);
    assert_eq!(f.code(), Some(0), "{}", f.stderr);
    for r in 0..2 {
        assert!(
            rank_lines(&f.stderr).iter().any(|(n, l)| *n == r
                && l.contains("unknown variable PHALANX_TIMOUT")
                && l.contains("did you mean PHALANX_TIMEOUT")),
            "rank {r} did not warn:\n{}",
            f.stderr
        );
    }
}

#[test]
fn missing_socket_interface_lists_the_ones_there_are() {
    let mut cmd = phalanx();
    cmd.env("PHALANX_SOCKET_IFNAME", "nosuch0").args([
        "bench",
        "allreduce",
        "--nproc-per-node",
        "2",
        "--standalone",
        "--iters",
        "3",
    ]);
    let f = run(cmd, Duration::from_secs(30));
    no_panic(&f);
    assert_ne!(f.code(), Some(0));
    let line = f
        .stderr
        .lines()
        .find(|l| l.contains("PHALANX_SOCKET_IFNAME=\"nosuch0\""))
        .unwrap_or_else(|| panic!("no interface error:\n{}", f.stderr));
    assert!(
        line.contains("matches no interface")
            && line.contains("available: ")
            && line.contains("lo"),
        "{line}"
    );
}
