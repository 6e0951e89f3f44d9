//! `relaunch_self`: a program started without a launcher launches itself, and the copies it
//! starts see the launcher's environment and act as workers instead of launching again.
//!
//! Roles: started by a launcher, it is a worker; with `LAUNCH_TEST_ROLE=agent` it calls
//! `relaunch_self`; otherwise it is the test, running itself as the agent under a deadline.

use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use phalanx_launch::{relaunch_self, started_by_launcher, LaunchArgs};
use phalanx_testing::process::clean_env;

fn main() -> ExitCode {
    if started_by_launcher() {
        let rank = std::env::var("RANK").unwrap();
        let args: Vec<String> = std::env::args().skip(1).collect();
        println!("worker {rank} args {args:?}");
        return ExitCode::SUCCESS;
    }
    if std::env::var("LAUNCH_TEST_ROLE").as_deref() == Ok("agent") {
        let args = LaunchArgs {
            nproc_per_node: 2,
            standalone: true,
            ..LaunchArgs::default()
        };
        return relaunch_self(&args).unwrap();
    }
    let mut child = clean_env(&mut Command::new(std::env::current_exe().unwrap()))
        .arg("--some-flag")
        .env("LAUNCH_TEST_ROLE", "agent")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(out).unwrap());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("relaunch did not finish within 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let text = reader.join().unwrap();
    assert!(status.success(), "{text}");
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "[rank 0]: worker 0 args [\"--some-flag\"]",
            "[rank 1]: worker 1 args [\"--some-flag\"]"
        ],
        "{text}"
    );
    println!("test launch_relaunch_self ... ok");
    ExitCode::SUCCESS
}
