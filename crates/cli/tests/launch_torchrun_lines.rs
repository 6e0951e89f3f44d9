//! torchrun's command line through the real `phalanx launch`: the lines of PyTorch's
//! distributed docs and elastic quickstart (`--rdzv-backend c10d --rdzv-endpoint --rdzv-id`,
//! `--nnodes MIN:MAX`, `--nproc-per-node auto|cpu|gpu`), `--rdzv-conf`, `-r/--redirects`,
//! `--local-addr`, `--role`, `--signals-to-handle`, and any other flag named as one, never
//! started as the program.

mod launch_util;

use std::process::Command;
use std::time::Duration;

use launch_util::*;

const DEADLINE: Duration = Duration::from_secs(30);
const TOKEN: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// `phalanx launch FLAGS -- sh -c SCRIPT` for one node of a multi-node job.
fn node(flags: &[&str], script: &str) -> Command {
    let mut c = launch_sh(flags, script);
    c.env("PHALANX_TOKEN", TOKEN).env("PHALANX_TIMEOUT", "20s");
    c
}

#[test]
fn an_unknown_flag_is_named_and_nothing_is_started() {
    let dir = TempDir::new("unknownflag");
    let marker = dir.path().join("started");
    // The issue's line, with a flag phalanx does not know in the middle.
    let mut c = phalanx();
    c.args([
        "launch",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--rdzv-backnd",
        "c10d",
        "--",
        "touch",
    ])
    .arg(&marker);
    let f = run(c, DEADLINE);
    assert_ne!(f.code(), Some(0), "{f:?}");
    assert!(
        f.stderr.contains("unknown flag --rdzv-backnd")
            && f.stderr.contains("did you mean --rdzv-backend?"),
        "{}",
        f.stderr
    );
    assert!(
        !f.stderr.contains("cannot start local rank"),
        "{}",
        f.stderr
    );
    assert!(
        !marker.exists(),
        "the unknown flag was started as the program"
    );
    // `--flag=value` is named by its flag.
    let f = run(launch_sh(&["--no-such-thing=3"], "true"), DEADLINE);
    assert!(
        f.stderr.contains("unknown flag --no-such-thing;"),
        "{}",
        f.stderr
    );
}

#[test]
fn nproc_per_node_takes_torchruns_words() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    let has_gpu = (0..8).any(|i| std::path::Path::new(&format!("/dev/nvidia{i}")).exists());
    for word in ["cpu", "auto"] {
        let f = run(
            launch_sh(
                &["--standalone", "--nproc-per-node", word],
                "echo W $WORLD_SIZE",
            ),
            DEADLINE,
        );
        assert_eq!(f.code(), Some(0), "{f:?}");
        let lines = rank_lines(&f.stdout);
        if word == "cpu" || !has_gpu {
            assert_eq!(lines.len(), cpus, "{word}: {}", f.stdout);
            assert!(
                lines.iter().all(|(_, b)| *b == format!("W {cpus}")),
                "{}",
                f.stdout
            );
        }
    }
    // Kubeflow Trainer's spelling, through the environment.
    let mut c = launch_sh(&["--standalone"], "echo W $WORLD_SIZE");
    c.env("PET_NPROC_PER_NODE", "cpu");
    let f = run(c, DEADLINE);
    assert_eq!(rank_lines(&f.stdout).len(), cpus, "{f:?}");
    if !has_gpu {
        let f = run(
            launch_sh(&["--standalone", "--nproc-per-node", "gpu"], "true"),
            DEADLINE,
        );
        assert_eq!(f.code(), Some(2), "{f:?}");
        assert!(
            f.stderr.contains("gpu: no GPU is visible on this node"),
            "{}",
            f.stderr
        );
    }
    let f = run(
        launch_sh(&["--standalone", "--nproc-per-node", "many"], "true"),
        DEADLINE,
    );
    assert!(
        f.stderr.contains("\"many\" is not a process count"),
        "{}",
        f.stderr
    );
}

/// The elastic quickstart's multi-node line, two nodes on this machine: the first agent to
/// bind the endpoint hosts the rendezvous and is node 0, the other takes node 1 on arrival;
/// no `--node-rank` anywhere.
#[test]
fn c10d_rendezvous_without_node_ranks() {
    let port = free_port().to_string();
    let endpoint = format!("localhost:{port}");
    let flags = [
        "--nnodes=2",
        "--nproc-per-node=2",
        "--max-restarts=3",
        "--rdzv-id=job42",
        "--rdzv-backend=c10d",
        &format!("--rdzv-endpoint={endpoint}"),
    ];
    let script = "echo R $RANK $WORLD_SIZE $GROUP_RANK $MASTER_PORT $TORCHELASTIC_RUN_ID";
    // Started together: whichever binds the endpoint first hosts (node 0), the other joins.
    let a = start(node(&flags, script));
    let b = start(node(&flags, script));
    let (fa, fb) = (a.wait(DEADLINE), b.wait(DEADLINE));
    assert_eq!(fa.code(), Some(0), "{fa:?}");
    assert_eq!(fb.code(), Some(0), "{fb:?}");
    let joined = format!("c10d rendezvous at {endpoint}: this is node 1");
    let (host, joiner) = match fb.stderr.contains(&joined) {
        true => (&fa, &fb),
        false => (&fb, &fa),
    };
    assert!(
        joiner.stderr.contains(&joined),
        "{}\n{}",
        fa.stderr,
        fb.stderr
    );
    assert!(!host.stderr.contains("this is node"), "{}", host.stderr);
    let mut ranks = Vec::new();
    for (f, group) in [(host, "0"), (joiner, "1")] {
        for (rank, body) in rank_lines(&f.stdout) {
            let p: Vec<&str> = body.split_whitespace().collect();
            assert_eq!(p[2..], ["4", group, port.as_str(), "job42"], "{body}");
            ranks.push(rank);
        }
    }
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2, 3]);
}

/// A node whose agent is SIGKILLed keeps its c10d node rank only until node 0 declares it
/// lost (its heartbeat stopped); the node started again takes that rank and the job, restarted
/// once (`--max-restarts 1`), ends with both nodes.
#[test]
fn c10d_a_killed_node_started_again_takes_its_rank_back() {
    let dir = TempDir::new("c10drejoin");
    let endpoint = format!("127.0.0.1:{}", free_port());
    let flags = |is_host: u32| {
        [
            "--nnodes=2".to_string(),
            "--max-restarts=1".into(),
            "--rdzv-backend=c10d".into(),
            format!("--rdzv-endpoint={endpoint}"),
            format!("--rdzv-conf=is_host={is_host}"),
        ]
    };
    // The first attempt runs until the kill; the second ends at once.
    let script = format!(
        "echo $$ > {d}/pid.$GROUP_RANK.$TORCHELASTIC_RESTART_COUNT; \
         if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then exec sleep 60; fi; echo R $RANK",
        d = dir.str()
    );
    let host_flags = flags(1);
    let a = start(node(
        &host_flags.iter().map(String::as_str).collect::<Vec<_>>(),
        &script,
    ));
    let join_flags = flags(0);
    let join: Vec<&str> = join_flags.iter().map(String::as_str).collect();
    let b = start(node(&join, &script));
    wait_for_files(dir.path(), "pid.1.0", 1, DEADLINE);
    signal(b.pid(), "KILL");
    let _ = b.wait(DEADLINE);
    let b2 = start(node(&join, &script));
    let (fa, fb) = (a.wait(DEADLINE), b2.wait(DEADLINE));
    assert_eq!(fa.code(), Some(0), "{fa:?}\n{fb:?}");
    assert_eq!(fb.code(), Some(0), "{fb:?}");
    assert!(
        fb.stderr.contains("this is node 1"),
        "the restarted node did not get its rank back: {}",
        fb.stderr
    );
    let mut ranks: Vec<u32> = [&fa, &fb]
        .iter()
        .flat_map(|f| rank_lines(&f.stdout).into_iter().map(|(r, _)| r))
        .collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1], "{fa:?}\n{fb:?}");
}

/// `--nnodes 1:2` with c10d: the job starts with the one node in, as torchrun's elastic line.
#[test]
fn c10d_elastic_range_starts_with_min_nodes() {
    let endpoint = format!("127.0.0.1:{}", free_port());
    let f = run(
        node(
            &[
                "--nnodes=1:2",
                "--nproc-per-node=2",
                "--rdzv-backend=c10d",
                &format!("--rdzv-endpoint={endpoint}"),
                "--rdzv-id=el",
                "--rdzv-conf=last_call_timeout=0.2",
            ],
            "echo W $WORLD_SIZE",
        ),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(0), "{f:?}");
    assert_eq!(rank_lines(&f.stdout).len(), 2, "{}", f.stdout);
}

#[test]
fn rendezvous_spellings_that_cannot_work_are_named() {
    let f = run(launch_sh(&["--rdzv-backend", "etcd-v2"], "true"), DEADLINE);
    assert_eq!(f.code(), Some(2), "{f:?}");
    assert!(
        f.stderr
            .contains("\"etcd-v2\" speaks etcd's v2 API, which etcd 3.6 removed")
            && f.stderr.contains("use `etcd`"),
        "{}",
        f.stderr
    );
    let f = run(launch_sh(&["--rdzv-backend", "c10d"], "true"), DEADLINE);
    assert!(
        f.stderr.contains("c10d needs --rdzv-endpoint"),
        "{}",
        f.stderr
    );
    let f = run(
        launch_sh(&["--standalone", "--rdzv-conf", "colour=blue"], "true"),
        DEADLINE,
    );
    assert!(
        f.stderr.contains("unknown key \"colour\"") && f.stderr.contains("join_timeout"),
        "{}",
        f.stderr
    );
    // `--rdzv-conf timeout=` bounds the wait for a host that never comes.
    let endpoint = format!("127.0.0.1:{}", free_port());
    let f = run(
        node(
            &[
                "--nnodes=2",
                "--rdzv-backend=c10d",
                &format!("--rdzv-endpoint={endpoint}"),
                "--rdzv-conf=is_host=0,timeout=1,use_libuv=1",
            ],
            "true",
        ),
        DEADLINE,
    );
    assert_ne!(f.code(), Some(0), "{f:?}");
    assert!(f.elapsed < Duration::from_secs(10), "{:?}", f.elapsed);
    assert!(
        f.stderr
            .contains(&format!("cannot reach the store of node 0 at {endpoint}")),
        "{}",
        f.stderr
    );
    assert!(
        f.stderr.contains("--rdzv-conf use_libuv: not used"),
        "{}",
        f.stderr
    );
}

#[test]
fn redirects_send_streams_to_files_only() {
    let dir = TempDir::new("redirects");
    let f = run(
        launch_sh(
            &[
                "--standalone",
                "--nproc-per-node",
                "2",
                "--log-dir",
                dir.str(),
                "--run-id",
                "rd",
                "-r",
                "1",
            ],
            "echo out-$RANK; echo err-$RANK >&2",
        ),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(0), "{f:?}");
    // stdout went to the files only; stderr still reaches the console.
    assert!(!f.stdout.contains("out-"), "{}", f.stdout);
    assert!(
        f.stderr.contains("err-0") && f.stderr.contains("err-1"),
        "{}",
        f.stderr
    );
    for lr in 0..2 {
        let file = dir.path().join(format!("rd/attempt_0/{lr}/stdout.log"));
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains(&format!("out-{lr}")), "{file:?}: {text}");
    }
    let f = run(launch_sh(&["--redirects", "3"], "true"), DEADLINE);
    assert!(
        f.stderr.contains("--redirects needs --log-dir"),
        "{}",
        f.stderr
    );
}

#[test]
fn role_and_local_addr_reach_the_workers() {
    let f = run(
        launch_sh(
            &[
                "--standalone",
                "--role",
                "trainer",
                "--local-addr",
                "127.0.0.1",
                "--log-line-prefix-template",
                "[${role_name} ${rank}] ",
            ],
            "echo $ROLE_NAME $PHALANX_SOCKET_IFNAME",
        ),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(0), "{f:?}");
    assert!(
        f.stdout.starts_with("[trainer 0] trainer ="),
        "{}",
        f.stdout
    );
    // 192.0.2.0/24 is documentation space: never an address of this machine.
    let f = run(
        launch_sh(&["--standalone", "--local-addr", "192.0.2.1"], "true"),
        DEADLINE,
    );
    assert_ne!(f.code(), Some(0), "{f:?}");
    assert!(
        f.stderr.contains("--local-addr \"192.0.2.1\"")
            && f.stderr.contains("is not an address of this machine"),
        "{}",
        f.stderr
    );
}

/// Slurm's warning before a time limit (`--signal=B:USR1@T`) reaches the workers through
/// `--signals-to-handle`; they exit on it and the launcher ends with 128 + SIGUSR1.
#[test]
fn signals_to_handle_forwards_sigusr1_to_the_workers() {
    let dir = TempDir::new("usr1");
    let script = format!(
        "trap 'echo got-usr1 > {d}/usr1.$RANK; exit 0' USR1; echo $$ > {d}/pid.$RANK; \
         while true; do sleep 0.05; done",
        d = dir.str()
    );
    let run_ = start(launch_sh(
        &[
            "--standalone",
            "--nproc-per-node",
            "2",
            "--signals-to-handle",
            "SIGTERM,SIGINT,SIGUSR1",
        ],
        &script,
    ));
    wait_for_files(dir.path(), "pid.", 2, DEADLINE);
    signal(run_.pid(), "USR1");
    let f = run_.wait(DEADLINE);
    assert_eq!(f.code(), Some(128 + 10), "{f:?}");
    assert!(f.stderr.contains("received SIGUSR1"), "{}", f.stderr);
    for r in 0..2 {
        assert!(dir.path().join(format!("usr1.{r}")).exists(), "rank {r}");
    }
    let f = run(
        launch_sh(&["--signals-to-handle", "SIGFOO"], "true"),
        DEADLINE,
    );
    assert!(
        f.stderr.contains("\"SIGFOO\" is not a signal") && f.stderr.contains("SIGUSR1"),
        "{}",
        f.stderr
    );
}
