//! torchrun's program rules through the real binary: a `.py` program runs under Python, `-m`
//! runs a module, `--no-python` runs the program as it is, and the seed's underscore spelling
//! (`--nproc_per_node=2`) works. Skips, saying why, without python3.

mod launch_util;

use std::time::Duration;

use launch_util::{phalanx, rank_lines, run, say, TempDir};

const SCRIPT: &str = "import os, sys\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], 'args', ' '.join(sys.argv[1:]))\n";

fn have_python() -> bool {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        say("SKIPPED launch_python: no python3 on PATH");
    }
    ok
}

fn ranks_said(stdout: &str, args: &str) -> Vec<u32> {
    let mut ranks: Vec<u32> = rank_lines(stdout)
        .into_iter()
        .filter(|(r, l)| l == &format!("rank {r} of 2 args {args}"))
        .map(|(r, _)| r)
        .collect();
    ranks.sort_unstable();
    ranks
}

#[test]
fn a_py_program_runs_under_python_and_m_runs_a_module() {
    if !have_python() {
        return;
    }
    let dir = TempDir::new("launch-python");
    std::fs::write(dir.path().join("train.py"), SCRIPT).unwrap();
    std::fs::write(dir.path().join("phx_mod.py"), SCRIPT).unwrap();

    let mut cmd = phalanx();
    cmd.current_dir(dir.path()).args([
        "launch",
        "--standalone",
        "--nproc_per_node=2",
        "train.py",
        "--epochs",
        "3",
    ]);
    let f = run(cmd, Duration::from_secs(60));
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    assert_eq!(ranks_said(&f.stdout, "--epochs 3"), [0, 1], "{}", f.stdout);

    let mut cmd = phalanx();
    cmd.current_dir(dir.path()).args([
        "launch",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "phx_mod",
        "x",
    ]);
    let f = run(cmd, Duration::from_secs(60));
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    assert_eq!(ranks_said(&f.stdout, "x"), [0, 1], "{}", f.stdout);
}

#[test]
fn no_python_runs_the_program_as_it_is() {
    if !have_python() {
        return;
    }
    let dir = TempDir::new("launch-no-python");
    let script = dir.path().join("run.py");
    std::fs::write(&script, format!("#!/usr/bin/env python3\n{SCRIPT}")).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut cmd = phalanx();
    cmd.args([
        "launch",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--no-python",
    ])
    .arg(&script)
    .arg("y");
    let f = run(cmd, Duration::from_secs(60));
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    assert_eq!(ranks_said(&f.stdout, "y"), [0, 1], "{}", f.stdout);
}

#[test]
fn module_and_no_python_together_are_refused() {
    let mut cmd = phalanx();
    cmd.args(["launch", "--standalone", "-m", "--no-python", "x"]);
    let f = run(cmd, Duration::from_secs(30));
    assert_ne!(f.code(), Some(0));
    assert!(
        f.stderr.contains("-m/--module") && f.stderr.contains("--no-python"),
        "{}",
        f.stderr
    );
}

#[test]
fn fault_tolerance_with_a_python_program_warns_and_restarts_the_group() {
    if !have_python() {
        return;
    }
    let dir = TempDir::new("launch-python-ft");
    // Rank 1 fails once (its marker file is not there yet), then everyone succeeds.
    let marker = dir.path().join("failed-once");
    let script = format!(
        "import os, sys, time\nm = {marker:?}\nif os.environ['RANK'] == '1' and not os.path.exists(m):\n    time.sleep(1.2)\n    open(m, 'w').close()\n    sys.exit(3)\ntime.sleep(0.2)\n",
        marker = marker.display().to_string()
    );
    std::fs::write(dir.path().join("job.py"), script).unwrap();
    let mut cmd = phalanx();
    cmd.current_dir(dir.path()).args([
        "launch",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--fault-tolerance",
        "--max-restarts",
        "1",
        "job.py",
    ]);
    let f = run(cmd, Duration::from_secs(60));
    assert_eq!(f.code(), Some(0), "{f:?}");
    assert!(
        f.stderr
            .contains("--fault-tolerance needs a program that re-forms"),
        "{}",
        f.stderr
    );
    // The whole group restarted, as without the flag; no single replacement.
    assert!(
        f.stderr.contains("restart 1 of --max-restarts 1"),
        "{}",
        f.stderr
    );
    assert!(!f.stderr.contains("a replacement joins"), "{}", f.stderr);
}
