//! Simulated hosts for the multi-host tests: network namespaces from `tests/netns/netns.sh`,
//! one `phalanx` node agent per namespace over real TCP, every run under one deadline.
//!
//! Needs root and iproute2 (`ip netns`, veth, bridge); without them [`Hosts::up`] prints why
//! and returns `None`, and the test returns early. `PHX_NETNS_REQUIRE=1` turns that skip into
//! a failure (CI on a machine known to have the privileges). Teardown is a `Drop` guard:
//! every process left inside the namespaces is killed by pid and the namespaces are deleted,
//! on success, failure and panic alike; setups left by a killed test process are collected
//! (`netns.sh gc`) before the first new one.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

mod node;
mod run;
#[allow(unused_imports)] // not every test binary uses every helper
pub use node::*;
#[allow(unused_imports)]
pub use run::*;

/// A job token shared by every node of a test job.
pub const TOKEN: &str = "5a5a5a5a00112233445566778899aabbccddeeff00112233445566778899aabb";
/// The store port; each setup is its own network, so nothing else can hold it.
pub const PORT: u16 = 29500;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/netns/netns.sh")
}

/// Why the namespace tests cannot run here, if they cannot.
fn unavailable() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    // "Uid: real effective saved fs": the effective uid decides.
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_string));
    if euid.as_deref() != Some("0") {
        return Some(format!("not root (effective uid {euid:?})"));
    }
    match Command::new("ip").args(["netns", "list"]).output() {
        Err(e) => Some(format!("`ip` (iproute2) not runnable: {e}")),
        Ok(o) if !o.status.success() => Some(format!(
            "`ip netns list` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => None,
    }
}

fn skip(test: &str, reason: &str) {
    let require = std::env::var("PHX_NETNS_REQUIRE").is_ok_and(|v| v == "1");
    assert!(!require, "{test}: PHX_NETNS_REQUIRE=1 but {reason}");
    say(&format!(
        "SKIPPED {test}: needs root and iproute2 network namespaces: {reason}"
    ));
}

pub use phalanx_testing::process::say;

fn draw_id() -> u32 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mix = nanos
        ^ (u64::from(std::process::id()) << 20)
        ^ COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // 1..=254: the third octet of 10.77.<id>.x.
    (mix.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as u32 % 254 + 1
}

/// Options of a namespace setup.
#[derive(Clone, Debug, Default)]
pub struct Net {
    /// The rate per host link (`1gbit`, shaped by tbf unless `htb`), none when `None`.
    pub rate: Option<String>,
    /// A second interface per host (`eth1`, 10.77.<id>.129+i) on a second bridge.
    pub two_ifaces: bool,
    /// Shape `rate` with an HTB class instead of tbf (a WAN link's usual shaper).
    pub htb: bool,
}

/// N simulated hosts; torn down on drop.
pub struct Hosts {
    /// The setup's id: namespaces `phx-<id>-<i>`, addresses `10.77.<id>.<i+1>`.
    pub id: u32,
    /// Number of hosts.
    pub n: usize,
}

impl Hosts {
    /// Creates `n` hosts, or prints why the test is skipped and returns `None`.
    pub fn up(test: &str, n: usize, net: &Net) -> Option<Hosts> {
        if let Some(reason) = unavailable() {
            skip(test, &reason);
            return None;
        }
        static GC: Once = Once::new();
        GC.call_once(|| {
            let _ = Command::new("bash").arg(script()).arg("gc").status();
        });
        let mut last = String::new();
        for _ in 0..64 {
            let id = draw_id();
            let mut cmd = Command::new("bash");
            cmd.arg(script())
                .args(["up", &n.to_string(), "--id", &id.to_string()])
                .args(["--owner", &std::process::id().to_string()]);
            if let Some(rate) = &net.rate {
                cmd.args(["--rate", rate]);
                if net.htb {
                    cmd.arg("--htb");
                }
            }
            if net.two_ifaces {
                cmd.arg("--two-ifaces");
            }
            let out = cmd.output().expect("running tests/netns/netns.sh");
            match out.status.code() {
                Some(0) => return Some(Hosts { id, n }),
                // Another run holds this id: draw again (nothing of theirs is touched).
                Some(3) => continue,
                _ => {
                    last = String::from_utf8_lossy(&out.stderr).trim().to_string();
                    break;
                }
            }
        }
        // The script removed its partial setup itself; root with `ip` but no namespaces
        // (an unprivileged container) is an environment without the feature, not a bug.
        skip(test, &format!("netns.sh up {n} failed: {last}"));
        None
    }

    /// Namespace of host `i`.
    pub fn ns(&self, i: usize) -> String {
        format!("phx-{}-{i}", self.id)
    }

    /// Address of host `i` on `eth0`.
    pub fn addr(&self, i: usize) -> String {
        format!("10.77.{}.{}", self.id, i + 1)
    }

    /// Address of host `i` on `eth1` (with `two_ifaces`).
    pub fn addr2(&self, i: usize) -> String {
        format!("10.77.{}.{}", self.id, i + 129)
    }

    /// `ip netns exec <host i> <phalanx>` with a clean environment (no launcher variables
    /// from whatever runs the tests), the job token and a short collective timeout.
    pub fn phalanx(&self, i: usize) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(i), env!("CARGO_BIN_EXE_phalanx")]);
        phalanx_testing::process::clean_env(&mut c);
        c.env("PHALANX_TOKEN", TOKEN)
            .env("PHALANX_TIMEOUT", "30s")
            .env("NO_COLOR", "1");
        c
    }

    /// The launch flags of node `node_rank` in a job of `nnodes` nodes whose node 0 is host 0.
    pub fn launch_flags(&self, nnodes: usize, node_rank: usize, nproc: usize) -> Vec<String> {
        self.launch_flags_at(PORT, nnodes, node_rank, nproc)
    }

    /// [`Hosts::launch_flags`] with the store on `port` (several jobs in one setup).
    pub fn launch_flags_at(
        &self,
        port: u16,
        nnodes: usize,
        node_rank: usize,
        nproc: usize,
    ) -> Vec<String> {
        [
            "--nnodes",
            &nnodes.to_string(),
            "--node-rank",
            &node_rank.to_string(),
            "--nproc-per-node",
            &nproc.to_string(),
            "--master-addr",
            &self.addr(0),
            "--master-port",
            &port.to_string(),
        ]
        .map(String::from)
        .to_vec()
    }

    /// A byte counter of interface `dev` inside host `i` (`tx_bytes`, `rx_bytes`).
    pub fn counter(&self, i: usize, dev: &str, which: &str) -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns(i), "cat"])
            .arg(format!("/sys/class/net/{dev}/statistics/{which}"))
            .output()
            .expect("reading interface counters");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no counter {which} for {dev} in {}", self.ns(i)))
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Kills whatever is left inside the namespaces (by pid), then deletes them.
        let _ = Command::new("bash")
            .arg(script())
            .args(["down", "--id", &self.id.to_string()])
            .status();
    }
}

impl Hosts {
    /// Waits until something listens on TCP `port` inside host `i`.
    pub fn wait_listening(&self, i: usize, port: u16, deadline: Duration) {
        let end = Instant::now() + deadline;
        loop {
            let out = Command::new("ip")
                .args(["netns", "exec", &self.ns(i), "ss", "-Htln"])
                .arg(format!("sport = :{port}"))
                .output()
                .expect("running ss");
            if !String::from_utf8_lossy(&out.stdout).trim().is_empty() {
                return;
            }
            assert!(
                Instant::now() < end,
                "nothing listens on port {port} in {} after {deadline:?}",
                self.ns(i)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
