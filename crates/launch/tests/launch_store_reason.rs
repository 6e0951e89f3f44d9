//! The failure summary shows the reason a worker published to the store (`error/<rank>` under
//! its PHALANX_STORE_PREFIX), as the process group does, and the root cause comes first.
//!
//! One binary, three roles chosen by `LAUNCH_TEST_ROLE`: unset, it is the test, which runs
//! itself as the launcher (to capture the launcher's stderr) under a deadline; `launcher` calls
//! `phalanx_launch::launch` with itself as the program; `worker` is a worker that connects to
//! the store with the credentials the launcher gave it.

use std::ffi::OsString;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use phalanx_launch::LaunchArgs;
use phalanx_store::{Auth, PrefixStore, Store, TcpStore};

fn main() -> ExitCode {
    match std::env::var("LAUNCH_TEST_ROLE").as_deref() {
        Ok("launcher") => launcher(),
        Ok("worker") => worker(),
        _ => test(),
    }
}

fn launcher() -> ExitCode {
    let args = LaunchArgs {
        nproc_per_node: 3,
        standalone: true,
        ..LaunchArgs::default()
    };
    let me = std::env::current_exe().unwrap();
    std::env::set_var("LAUNCH_TEST_ROLE", "worker");
    phalanx_launch::launch(&args, &[OsString::from(me)]).unwrap()
}

fn worker() -> ExitCode {
    let var = |k: &str| std::env::var(k).unwrap();
    let rank: u32 = var("RANK").parse().unwrap();
    let addr = format!("{}:{}", var("MASTER_ADDR"), var("MASTER_PORT"));
    let store = TcpStore::connect(&addr, &Auth::from_env(), Duration::from_secs(10)).unwrap();
    let store = PrefixStore::new(var("PHALANX_STORE_PREFIX"), store);
    if rank == 2 {
        store
            .set("error/2", b"rank 2 failed: loss is NaN at step 17")
            .unwrap();
        eprintln!("worker 2 exiting");
        return ExitCode::from(6);
    }
    // The others wait to be stopped.
    std::thread::sleep(Duration::from_secs(30));
    ExitCode::SUCCESS
}

fn test() -> ExitCode {
    let mut child =
        phalanx_testing::process::clean_env(&mut Command::new(std::env::current_exe().unwrap()))
            .env("LAUNCH_TEST_ROLE", "launcher")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the launcher did not finish within 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let text = reader.join().unwrap();
    assert_eq!(status.code(), Some(6), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let cause = lines
        .iter()
        .position(|l| l.starts_with("root cause: "))
        .unwrap_or_else(|| panic!("no root cause in:\n{text}"));
    assert!(lines[cause].contains("rank 2 (local_rank 2"), "{text}");
    assert!(lines[cause].contains("exit code 6"), "{text}");
    assert_eq!(
        lines[cause + 1].trim(),
        "reason:    rank 2 failed: loss is NaN at step 17",
        "{text}"
    );
    assert!(
        lines[cause + 2].contains("last line: worker 2 exiting"),
        "{text}"
    );
    println!("test launch_store_reason ... ok");
    ExitCode::SUCCESS
}
