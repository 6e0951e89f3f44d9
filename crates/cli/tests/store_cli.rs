//! `phalanx store` through the real binary: serves authenticated clients (and PyTorch's with
//! `--torch-store`), refuses others,
//! stops cleanly on SIGTERM, and names the port (and its owner) when the port is taken.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use phalanx_store::{Auth, Store, TcpStore, TorchStore};

/// Kills the child on drop, so a failing test leaves no process behind.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn phalanx() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_phalanx"));
    c.env_remove("PHALANX_TOKEN")
        .env_remove("PHALANX_JOB_ID")
        .env_remove("MASTER_PORT");
    c
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "phalanx store did not exit within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn serves_until_sigterm() {
    let auth = Auth::random("cli-job");
    let child = phalanx()
        .args([
            "store",
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            "--torch-store",
        ])
        .env("PHALANX_TOKEN", auth.token_hex())
        .env("PHALANX_JOB_ID", &auth.job_id)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut guard = Guard(child);
    let stdout = guard.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("no listening line within 20 s");
    let addr = line
        .strip_prefix("phalanx store listening on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();

    let store = TcpStore::connect(&addr, &auth, Duration::from_secs(10)).unwrap();
    store.set("k", b"v").unwrap();
    assert_eq!(store.get("k").unwrap(), b"v");
    assert_eq!(store.add("n", 2).unwrap(), 2);
    let intruder = Auth::new("cli-job", b"wrong".to_vec());
    assert!(TcpStore::connect(&addr, &intruder, Duration::from_secs(5)).is_err());
    // PyTorch's protocol on the same port, its keys apart from phalanx's.
    let torch = TorchStore::connect(&addr, Duration::from_secs(10)).unwrap();
    torch.set("/k", b"torch").unwrap();
    assert_eq!(torch.get("/k").unwrap(), b"torch");
    assert!(!torch.check(&["k"]).unwrap());
    drop(store);

    let pid = guard.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = wait_exit(&mut guard.0, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    let mut stderr = String::new();
    guard
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(stderr.contains("shutting down"), "{stderr}");
    assert!(
        stderr.contains("--torch-store") && stderr.contains("no authentication"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(&auth.token_hex()),
        "the token leaked into the log"
    );
    assert!(!stderr.contains("PHALANX_TOKEN is not set"), "{stderr}");
}

#[test]
fn warns_without_a_token_and_names_a_taken_port() {
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port().to_string();
    let mut guard = Guard(
        phalanx()
            .args(["store", "--port", &port, "--host", "127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let status = wait_exit(&mut guard.0, Duration::from_secs(20));
    assert!(!status.success());
    let mut stderr = String::new();
    guard
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(stderr.contains("PHALANX_TOKEN is not set"), "{stderr}");
    assert!(
        stderr.contains(&format!("port {port} is already in use")),
        "{stderr}"
    );
    if std::path::Path::new("/proc/net/tcp").exists() {
        assert!(
            stderr.contains(&format!("pid {}", std::process::id())),
            "{stderr}"
        );
    }
}
