//! Kubeflow Trainer v2's torch runtime, its contract exactly, on network-namespace hosts: each
//! "pod" runs `phalanx train` with nothing but the variables the runtime injects
//! (`PET_NNODES`, `PET_NPROC_PER_NODE=auto`, `PET_NODE_RANK`,
//! `PET_MASTER_ADDR=<job>-node-0-0.<job>`, `PET_MASTER_PORT=29500`), pods start in any order,
//! and the master's DNS name resolves only some time after they started: the name is added
//! to each host's `/etc/hosts` late (`ip netns exec` mounts `/etc/netns/<ns>/hosts` over it,
//! so the test never touches this machine's own `/etc/hosts`).
//!
//! Skipped with a printed reason without root and `ip netns`.

mod netns_util;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use netns_util::{dump, run_all, Hosts, Net};

const DEADLINE: Duration = Duration::from_secs(180);
/// What Kubeflow Trainer's torch runtime sets for a TrainJob named `job`.
const MASTER: &str = "job-node-0-0.job";

/// The hosts files of a setup's namespaces, removed on drop.
struct HostsFiles(Vec<PathBuf>);

impl HostsFiles {
    /// `/etc/netns/<ns>/hosts` for every host, with localhost only.
    fn new(h: &Hosts) -> HostsFiles {
        let files = (0..h.n)
            .map(|i| {
                let dir = PathBuf::from("/etc/netns").join(h.ns(i));
                std::fs::create_dir_all(&dir).unwrap();
                let file = dir.join("hosts");
                std::fs::write(&file, "127.0.0.1 localhost\n").unwrap();
                file
            })
            .collect();
        HostsFiles(files)
    }

    /// Appends `line` to every host's file, in place (the mount follows the same file).
    fn append(files: &[PathBuf], line: &str) {
        for f in files {
            let mut file = std::fs::OpenOptions::new().append(true).open(f).unwrap();
            writeln!(file, "{line}").unwrap();
        }
    }
}

impl Drop for HostsFiles {
    fn drop(&mut self) {
        for f in &self.0 {
            if let Some(dir) = f.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

/// `phalanx train` in host `i` as Kubeflow's pod `i` runs it.
fn pod(h: &Hosts, i: usize, nnodes: usize) -> std::process::Command {
    let mut c = h.phalanx(i);
    c.arg("train")
        .args([
            "--dataset",
            "digits",
            "--epochs",
            "1",
            "--hidden",
            "32",
            "--json",
        ])
        .env("PET_NNODES", nnodes.to_string())
        .env("PET_NPROC_PER_NODE", "auto")
        .env("PET_NODE_RANK", i.to_string())
        .env("PET_MASTER_ADDR", MASTER)
        .env("PET_MASTER_PORT", "29500");
    c
}

#[test]
fn needs_root_netns_pods_in_any_order_with_the_master_name_resolving_late() {
    let Some(h) = Hosts::up("kubeflow_late_dns", 2, &Net::default()) else {
        return;
    };
    let files = HostsFiles::new(&h);
    // Pod 1 first, as a scheduler may start it; neither pod can resolve the master yet.
    let cmds = vec![pod(&h, 1, 2), pod(&h, 0, 2)];
    let paths = files.0.clone();
    let line = format!("{} {MASTER}", h.addr(0));
    let adder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2500));
        HostsFiles::append(&paths, &line);
    });
    let begin = Instant::now();
    let nodes = run_all(cmds, DEADLINE);
    adder.join().unwrap();
    for n in &nodes {
        assert_eq!(n.code(), Some(0), "{}", dump(&nodes));
    }
    // `auto` on a machine without GPUs: one worker per CPU of each pod.
    let cpus = std::thread::available_parallelism().unwrap().get();
    let mut ranks = BTreeSet::new();
    let mut digests = BTreeSet::new();
    for n in &nodes {
        for line in n.stdout.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if v["event"] == "summary" {
                ranks.insert(v["rank"].as_u64().unwrap());
                digests.insert(v["param_digest"].as_str().unwrap().to_string());
            }
        }
    }
    assert_eq!(ranks.len(), 2 * cpus, "{}", dump(&nodes));
    assert_eq!(digests.len(), 1, "replicas differ: {digests:?}");
    assert!(begin.elapsed() >= Duration::from_millis(2500));
}

#[test]
fn needs_root_netns_a_master_name_that_never_resolves_is_named() {
    let Some(h) = Hosts::up("kubeflow_no_dns", 2, &Net::default()) else {
        return;
    };
    let _files = HostsFiles::new(&h);
    let mut p1 = pod(&h, 1, 2);
    let mut p0 = pod(&h, 0, 2);
    for p in [&mut p0, &mut p1] {
        p.env("PHALANX_TIMEOUT", "3s");
    }
    let begin = Instant::now();
    let nodes = run_all(vec![p0, p1], Duration::from_secs(60));
    assert!(
        begin.elapsed() < Duration::from_secs(30),
        "{:?}",
        begin.elapsed()
    );
    // Pod 0 cannot resolve its own name to bind the store; pod 1 cannot reach it: each says
    // which name, after retrying for the rendezvous timeout.
    let (e0, e1) = (&nodes[0].stderr, &nodes[1].stderr);
    assert_ne!(nodes[0].code(), Some(0), "{}", dump(&nodes));
    assert_ne!(nodes[1].code(), Some(0), "{}", dump(&nodes));
    assert!(
        e0.contains(&format!("--master-addr \"{MASTER}\" does not resolve"))
            && e0.contains("retried for 3 s"),
        "{e0}"
    );
    assert!(
        e1.contains(&format!(
            "cannot reach the store of node 0 at {MASTER}:29500"
        )),
        "{e1}"
    );
}
