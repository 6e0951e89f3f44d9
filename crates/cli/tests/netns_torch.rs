//! A PyTorch job (`init_process_group("gloo")`, then `"phalanx"`) across two hosts (network
//! namespaces, real TCP) under `phalanx launch`: with `--torch-store` it runs and is correct;
//! without it the
//! store refuses the PyTorch clients, which cannot authenticate, and the job ends at once
//! with the sentence naming the flag (docs/pytorch.md). Skipped with a printed reason without
//! root and `ip netns`, or without a Python that has torch.

mod netns_util;

use std::process::Command;
use std::time::{Duration, Instant};

use netns_util::{dump, run_all, Hosts, Net};

const DEADLINE: Duration = Duration::from_secs(90);

const SCRIPT: &str = r#"
import sys, torch, torch.distributed as dist
backend = sys.argv[1]
if backend == "phalanx":
    import phalanx_torch
dist.init_process_group(backend)
r, w = dist.get_rank(), dist.get_world_size()
t = torch.full((4096,), float(r + 1))
dist.all_reduce(t)
assert t.eq(w * (w + 1) / 2).all(), t
print(f"rank {r} of {w}: {backend} across hosts ok", flush=True)
dist.destroy_process_group()
"#;

fn job(
    h: &Hosts,
    py: &std::path::Path,
    script: &str,
    backend: &str,
    port: u16,
    torch_store: bool,
) -> Vec<Command> {
    (0..2)
        .map(|i| {
            let mut c = h.phalanx(i);
            c.arg("launch")
                .args(h.launch_flags_at(port, 2, i, 1))
                .env("PHALANX_PYTHON", py)
                // Gloo picks its interface from the host name otherwise, which names no
                // interface inside a namespace.
                .env("GLOO_SOCKET_IFNAME", "eth0");
            if torch_store && i == 0 {
                c.arg("--torch-store");
            }
            c.args([script, backend]);
            c
        })
        .collect()
}

#[test]
fn needs_root_netns_pytorch_across_hosts_needs_torch_store_and_runs_with_it() {
    let test = "needs_root_netns_pytorch_across_hosts_needs_torch_store_and_runs_with_it";
    let Some(py) = phalanx_testing::process::torch_python(test) else {
        return;
    };
    let Some(h) = Hosts::up(test, 2, &Net::default()) else {
        return;
    };
    let dir = phalanx_testing::process::TempDir::new("netns-torch");
    let script = dir.path().join("job.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let script = script.display().to_string();

    // Without the flag: refused, and the job ends at once naming the flag.
    let start = Instant::now();
    let nodes = run_all(job(&h, &py, &script, "gloo", 29501, false), DEADLINE);
    let took = start.elapsed();
    assert_ne!(nodes[0].code(), Some(0), "{}", dump(&nodes));
    assert!(
        nodes[0].stderr.contains("root cause:") && nodes[0].stderr.contains("--torch-store"),
        "node 0 names the refusal and the flag:\n{}",
        dump(&nodes)
    );
    assert_ne!(nodes[1].code(), Some(0), "{}", dump(&nodes));
    assert!(
        took < Duration::from_secs(30),
        "took {took:?}:\n{}",
        dump(&nodes)
    );

    // With it: a warning says what it opens, and the job is correct, with Gloo and with
    // phalanx's own backend (when phalanx_torch is installed).
    let phalanx_torch = Command::new(&py)
        .args(["-c", "import phalanx_torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    let mut backends = vec!["gloo"];
    if phalanx_torch {
        backends.push("phalanx");
    } else {
        netns_util::say(&format!(
            "{test}: phalanx_torch is not installed in {}; only gloo checked",
            py.display()
        ));
    }
    for (i, backend) in backends.into_iter().enumerate() {
        let nodes = run_all(
            job(&h, &py, &script, backend, 29502 + i as u16, true),
            DEADLINE,
        );
        for (i, f) in nodes.iter().enumerate() {
            assert_eq!(f.code(), Some(0), "{backend} node {i}:\n{}", dump(&nodes));
        }
        assert!(
            nodes[0].stderr.contains("no authentication"),
            "{}",
            dump(&nodes)
        );
        let ok = nodes
            .iter()
            .flat_map(|f| f.stdout.lines())
            .filter(|l| l.ends_with(&format!("{backend} across hosts ok")))
            .count();
        assert_eq!(ok, 2, "{}", dump(&nodes));
    }
}
