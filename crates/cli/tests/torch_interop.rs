//! PyTorch and phalanx, both directions, with real torch (`torch_python` finds it; skipped
//! with a line saying why without it):
//! - a PyTorch script under `phalanx launch` (`init_process_group("gloo")` through phalanx's
//!   store, which speaks PyTorch's TCPStore protocol), every store query checked from Python;
//! - phalanx under torchrun (`bench allreduce --check`, `train`), rendezvousing through
//!   torchrun's own store;
//! - a PyTorch rank SIGKILLed under `phalanx launch`: named first, every process gone at once.

mod launch_util;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use launch_util::*;

const DEADLINE: Duration = Duration::from_secs(120);

/// Every TCPStore query a torch 2.x client sends, against the store `phalanx launch` hosts,
/// then Gloo's collectives on a process group rendezvoused through it.
const GLOO_SCRIPT: &str = r#"
import os, threading, time
from datetime import timedelta
import torch, torch.distributed as dist

rank = int(os.environ["RANK"])
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False,
                      timedelta(seconds=20))
p = f"/test/{rank}/"
store.set(p + "k", "v1")
assert store.get(p + "k") == b"v1"
assert store.add(p + "n", 5) == 5 and store.add(p + "n", -2) == 3
assert store.compare_set(p + "k", "v1", "v2") == b"v2"
assert store.compare_set(p + "k", "nope", "v3") == b"v2"
assert store.compare_set(p + "missing", "x", "y") == b"x"  # PyTorch's four cases
assert store.check([p + "k"]) and not store.check([p + "k", p + "missing"])
t0 = time.monotonic()
try:
    store.wait([p + "missing"], timedelta(seconds=1))
    raise SystemExit("wait on a missing key returned")
except dist.DistStoreError:
    pass
assert time.monotonic() - t0 < 5
store.set(p + "after_cancel", "ok")  # the connection is in step after CANCEL_WAIT
assert store.get(p + "after_cancel") == b"ok"
other = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False,
                      timedelta(seconds=20))
threading.Timer(0.3, lambda: other.set(p + "late", "x")).start()
assert store.get(p + "late") == b"x"  # a blocking get woken by another client
assert store.delete_key(p + "n") and not store.delete_key(p + "n")
store.append(p + "k", "xx")
assert store.multi_get([p + "k", p + "late"]) == [b"v2xx", b"x"]
store.multi_set([p + "a", p + "b"], ["1", "2"])
assert store.get(p + "b") == b"2"
store.queue_push(p + "q", "e1"); store.queue_push(p + "q", "e2")
assert store.queue_len(p + "q") == 2
assert store.queue_pop(p + "q") == b"e1" and store.queue_pop(p + "q", block=False) == b"e2"
assert p + "k" in store.list_keys() and store.num_keys() >= 5
store.barrier("/test/barrier", 2)

dist.init_process_group("gloo")
w = dist.get_world_size()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert t.eq(w * (w + 1) / 2).all(), t
b = torch.arange(10) if rank == 0 else torch.zeros(10, dtype=torch.long)
dist.broadcast(b, 0)
assert b.tolist() == list(range(10))
out = [torch.zeros(3) for _ in range(w)]
dist.all_gather(out, torch.full((3,), float(rank)))
assert [o[0].item() for o in out] == [float(r) for r in range(w)]
dist.barrier()
print(f"rank {rank} of {w}: store and gloo ok", flush=True)
dist.destroy_process_group()
"#;

fn write_script(dir: &TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn launch_python(py: &Path, flags: &[&str], script: &str) -> Command {
    let mut c = phalanx();
    c.env("PHALANX_PYTHON", py)
        .arg("launch")
        .args(flags)
        .arg(script);
    c
}

#[test]
fn a_pytorch_gloo_script_runs_under_phalanx_launch() {
    let Some(py) = torch_python("a_pytorch_gloo_script_runs_under_phalanx_launch") else {
        return;
    };
    let dir = TempDir::new("torch-gloo");
    let script = write_script(&dir, "train.py", GLOO_SCRIPT);
    let f = run(
        launch_python(&py, &["--standalone", "--nproc-per-node", "2"], &script),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    let mut ok: Vec<u32> = rank_lines(&f.stdout)
        .into_iter()
        .filter(|(r, l)| l == &format!("rank {r} of 2: store and gloo ok"))
        .map(|(r, _)| r)
        .collect();
    ok.sort_unstable();
    assert_eq!(ok, [0, 1], "{}\n{}", f.stdout, f.stderr);
}

/// `python -m torch.distributed.run` (torchrun) with these arguments, phalanx as the program.
fn torchrun(py: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(py);
    clean_env(&mut c)
        .args([
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
        ])
        .args(["--no-python", env!("CARGO_BIN_EXE_phalanx")])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c
}

#[test]
fn phalanx_runs_under_torchrun_through_its_store() {
    let Some(py) = torch_python("phalanx_runs_under_torchrun_through_its_store") else {
        return;
    };
    let f = run(
        torchrun(
            &py,
            &[
                "bench",
                "allreduce",
                "--check",
                "--sizes",
                "4K,1M",
                "--iters",
                "3",
            ],
        ),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    let checked = f
        .stdout
        .lines()
        .filter(|l| l.trim_end().ends_with(" ok"))
        .count();
    assert_eq!(checked, 2, "one checked row per size:\n{}", f.stdout);

    // Training: every rank ends with the same parameters.
    let f = run(
        torchrun(&py, &["train", "--epochs", "2", "--json"]),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    let digests: Vec<String> = f
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "summary")
        .map(|v| v["param_digest"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(digests.len(), 2, "a summary per rank:\n{}", f.stdout);
    assert_eq!(digests[0], digests[1], "replicas differ");
}

#[test]
fn a_sigkilled_pytorch_rank_is_named_first_and_every_process_is_gone_at_once() {
    let test = "a_sigkilled_pytorch_rank_is_named_first_and_every_process_is_gone_at_once";
    let Some(py) = torch_python(test) else {
        return;
    };
    let dir = TempDir::new("torch-kill");
    let script = format!(
        r#"
import os, signal, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
open(os.path.join({d:?}, f"pid.{{rank}}"), "w").write(str(os.getpid()))
dist.barrier()
if rank == 1:
    time.sleep(0.5)
    open(os.path.join({d:?}, "killed_at"), "w").write(repr(time.time()))
    os.kill(os.getpid(), signal.SIGKILL)
t = torch.ones(1000)
while True:
    dist.all_reduce(t)
"#,
        d = dir.str()
    );
    let script = write_script(&dir, "die.py", &script);
    let f = run(
        launch_python(&py, &["--standalone", "--nproc-per-node", "2"], &script),
        DEADLINE,
    );
    let ended = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert_eq!(f.code(), Some(137), "{}\n{}", f.stdout, f.stderr);
    let root = f
        .stderr
        .lines()
        .find(|l| l.starts_with("root cause:"))
        .unwrap_or_else(|| panic!("no root cause line:\n{}", f.stderr));
    assert!(
        root.contains("rank 1") && root.contains("SIGKILL"),
        "the killed rank is the root cause: {root}\n{}",
        f.stderr
    );
    let killed_at: f64 = std::fs::read_to_string(dir.path().join("killed_at"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let took = ended - killed_at;
    eprintln!("launcher exited {took:.2} s after the SIGKILL");
    // The issue's bound is 2 s; the margin absorbs a loaded CI machine, the figure is printed.
    assert!(took < 4.0, "the launcher took {took:.2} s to end the job");
    let pids = read_pids(dir.path(), "pid.");
    assert_eq!(pids.len(), 2);
    // Gone when the launcher returns (it waits for its workers); 2 s for the kernel's reaping.
    assert_eq!(survivors(&pids, Duration::from_secs(2)), Vec::<i32>::new());
}

#[test]
fn a_pytorch_exception_is_the_root_cause_in_its_own_words() {
    let test = "a_pytorch_exception_is_the_root_cause_in_its_own_words";
    let Some(py) = torch_python(test) else {
        return;
    };
    let dir = TempDir::new("torch-raise");
    let script = r#"
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    raise RuntimeError("rank 1 broke on purpose")
t = torch.ones(10)
while True:
    dist.all_reduce(t)
"#;
    let script = write_script(&dir, "raise.py", script);
    let f = run(
        launch_python(&py, &["--standalone", "--nproc-per-node", "2"], &script),
        DEADLINE,
    );
    assert_eq!(f.code(), Some(1), "{}\n{}", f.stdout, f.stderr);
    let report = &f.stderr[f.stderr.find("root cause:").expect("a report")..];
    let root = report.lines().next().unwrap();
    assert!(root.contains("rank 1"), "{report}");
    assert!(
        report.contains("RuntimeError: rank 1 broke on purpose"),
        "the exception, not a C++ frame, is the worker's line:\n{report}"
    );
}

#[test]
fn a_sigstopped_pytorch_rank_is_named_within_phalanx_timeout() {
    let test = "a_sigstopped_pytorch_rank_is_named_within_phalanx_timeout";
    let Some(py) = torch_python(test) else {
        return;
    };
    let dir = TempDir::new("torch-stop");
    // Rank 1 stops itself; Gloo alone would wait 30 minutes for it.
    let script = r#"
import os, signal, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    print("stopping now", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
t = torch.ones(10)
while True:
    dist.all_reduce(t)
"#;
    let script = write_script(&dir, "stop.py", script);
    let mut cmd = launch_python(&py, &["--standalone", "--nproc-per-node", "2"], &script);
    cmd.env("PHALANX_TIMEOUT", "3s");
    let start = std::time::Instant::now();
    let f = run(cmd, DEADLINE);
    let took = start.elapsed();
    eprintln!("named after {took:?} (PHALANX_TIMEOUT 3 s + start-up)");
    assert_eq!(f.code(), Some(1), "{}\n{}", f.stdout, f.stderr);
    let root = f
        .stderr
        .lines()
        .find(|l| l.starts_with("root cause:"))
        .unwrap_or_else(|| panic!("no root cause:\n{}", f.stderr));
    assert!(
        root.contains("rank 1") && root.contains("stopped (state T"),
        "{root}\n{}",
        f.stderr
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
}
