//! The `"phalanx"` torch.distributed backend (python/, `pip install ./python`) with real torch,
//! through the real launcher: python/tests/test_backend.py (every collective, dtype and op
//! against references) on 1–4 ranks, test_ddp.py (DDP equals whole-batch training, replicas
//! bitwise equal), test_failure.py and test_timeout.py (PhalanxError naming the culprit),
//! test_fsdp2.py (FSDP2 over phalanx equals FSDP2 over Gloo), test_mesh.py (DeviceMesh and
//! DTensor; groups named as Gloo's are) and test_dcp.py (torch.distributed.checkpoint across
//! world sizes). Skipped with a line saying why when no Python has torch and phalanx_torch
//! (.ci/run installs both).

mod launch_util;

use std::path::{Path, PathBuf};
use std::time::Duration;

use launch_util::*;

const DEADLINE: Duration = Duration::from_secs(180);

/// A Python with torch in which `phalanx_torch` imports, or `None` after saying why not.
fn backend_python(test: &str) -> Option<PathBuf> {
    let py = torch_python(test)?;
    let ok = std::process::Command::new(&py)
        .args(["-c", "import phalanx_torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        say(&format!(
            "SKIPPED {test}: phalanx_torch is not installed in {} (`pip install ./python`; \
             .ci/run does it)",
            py.display()
        ));
        return None;
    }
    Some(py)
}

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../python/tests")
        .join(name)
        .display()
        .to_string()
}

/// With a 2 s timeout: a test of failures fails fast.
fn launch(py: &Path, nproc: u32, name: &str) -> Finished {
    launch_with(py, nproc, "2s", &[name])
}

/// With a 30 s timeout: the checks of results run beside the other tests of this file, and
/// on 2 busy cores a rank can be off the CPU for more than 2 s.
fn launch_checks(py: &Path, nproc: u32, name: &str) -> Finished {
    launch_with(py, nproc, "30s", &[name])
}

/// `phalanx launch` of `script_and_args[0]` (in python/tests) with the rest as its arguments;
/// `timeout` bounds every wait of the phalanx groups (`PHALANX_TIMEOUT`).
fn launch_with(py: &Path, nproc: u32, timeout: &str, script_and_args: &[&str]) -> Finished {
    launch_env(py, nproc, timeout, &[], script_and_args)
}

/// [`launch_with`], with these variables set for the workers.
fn launch_env(
    py: &Path,
    nproc: u32,
    timeout: &str,
    env: &[(&str, &str)],
    script_and_args: &[&str],
) -> Finished {
    let mut c = phalanx();
    c.envs(env.iter().copied());
    c.env("PHALANX_PYTHON", py)
        .env("PHALANX_TIMEOUT", timeout)
        .args([
            "launch",
            "--standalone",
            "--nproc-per-node",
            &nproc.to_string(),
        ])
        .arg(script(script_and_args[0]))
        .args(&script_and_args[1..]);
    run(c, DEADLINE)
}

/// Asserts success and that every rank printed a line containing `what`.
fn every_rank_says(f: &Finished, nproc: u32, what: &str) {
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    let mut ranks: Vec<u32> = rank_lines(&f.stdout)
        .into_iter()
        .filter(|(_, l)| l.contains(what))
        .map(|(r, _)| r)
        .collect();
    ranks.sort_unstable();
    assert_eq!(
        ranks,
        (0..nproc).collect::<Vec<_>>(),
        "{}\n{}",
        f.stdout,
        f.stderr
    );
}

#[test]
fn every_collective_dtype_and_op_matches_the_reference_on_1_to_4_ranks() {
    let Some(py) =
        backend_python("every_collective_dtype_and_op_matches_the_reference_on_1_to_4_ranks")
    else {
        return;
    };
    for n in 1..=4 {
        let f = launch_checks(&py, n, "test_backend.py");
        every_rank_says(&f, n, "phalanx backend ok");
    }
}

#[test]
fn ddp_over_phalanx_equals_whole_batch_training() {
    let Some(py) = backend_python("ddp_over_phalanx_equals_whole_batch_training") else {
        return;
    };
    for n in [2, 3] {
        let f = launch_checks(&py, n, "test_ddp.py");
        every_rank_says(&f, n, "ddp over phalanx ok");
    }
    // TORCH_DISTRIBUTED_DEBUG=DETAIL wraps the backend in c10d's ProcessGroupWrapper, which
    // checks every collective against the other ranks' (Note [Backend lifetime]).
    let detail = [("TORCH_DISTRIBUTED_DEBUG", "DETAIL")];
    let f = launch_env(&py, 2, "30s", &detail, &["test_ddp.py"]);
    every_rank_says(&f, 2, "ddp over phalanx ok");
}

#[test]
fn failures_are_python_exceptions_naming_the_culprit() {
    let Some(py) = backend_python("failures_are_python_exceptions_naming_the_culprit") else {
        return;
    };
    let f = launch(&py, 3, "test_failure.py");
    every_rank_says(&f, 3, "caught the mismatch");
    let f = launch(&py, 2, "test_timeout.py");
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    assert!(
        f.stdout.contains("[rank 0]: rank 0 caught the timeout"),
        "{}\n{}",
        f.stdout,
        f.stderr
    );
}

#[test]
fn fsdp2_over_phalanx_equals_fsdp2_over_gloo() {
    let Some(py) = backend_python("fsdp2_over_phalanx_equals_fsdp2_over_gloo") else {
        return;
    };
    // 2 ranks: bitwise; 4 ranks: within 1e-6 on the 1-D mesh, bitwise as HSDP on 2x2.
    for n in [2, 4] {
        let f = launch_with(&py, n, "60s", &["test_fsdp2.py"]);
        every_rank_says(&f, n, "fsdp2 over phalanx ok");
        let bitwise = rank_lines(&f.stdout)
            .into_iter()
            .filter(|(r, l)| *r == 0 && l.contains("bitwise equal to gloo's"))
            .count();
        // 2 ranks: both models on the 1-D mesh; 4 ranks: both models as HSDP.
        assert!(bitwise >= 2, "{}\n{}", f.stdout, f.stderr);
    }
}

/// The `groups {...}` line of each rank (names and ranks of every group the script made).
fn group_lines(f: &Finished) -> Vec<(u32, String)> {
    let mut lines: Vec<(u32, String)> = rank_lines(&f.stdout)
        .into_iter()
        .filter(|(_, l)| l.starts_with("groups "))
        .collect();
    lines.sort();
    lines
}

#[test]
fn device_mesh_and_dtensor_over_phalanx_name_groups_as_gloo() {
    let Some(py) = backend_python("device_mesh_and_dtensor_over_phalanx_name_groups_as_gloo")
    else {
        return;
    };
    for n in [2, 4] {
        let ours = launch_with(&py, n, "60s", &["test_mesh.py", "phalanx"]);
        every_rank_says(&ours, n, "mesh and dtensor over phalanx ok");
        let gloo = launch_with(&py, n, "60s", &["test_mesh.py", "gloo"]);
        every_rank_says(&gloo, n, "mesh and dtensor over gloo ok");
        let (a, b) = (group_lines(&ours), group_lines(&gloo));
        assert_eq!(a.len(), n as usize, "{}", ours.stdout);
        assert_eq!(a, b, "phalanx's groups differ from gloo's");
        // A mesh larger than the world: torch's sentence, naming both sizes, on every rank.
        every_rank_says(
            &ours,
            n,
            &format!("default world size {n}, but found {} ranks", n + 1),
        );
    }
}

#[test]
fn dcp_checkpoint_saved_at_4_ranks_loads_at_4_3_and_2() {
    let Some(py) = backend_python("dcp_checkpoint_saved_at_4_ranks_loads_at_4_3_and_2") else {
        return;
    };
    let dir = TempDir::new("dcp_checkpoint_saved_at_4_ranks_loads_at_4_3_and_2");
    let f = launch_with(&py, 4, "60s", &["test_dcp.py", "save", dir.str()]);
    every_rank_says(&f, 4, "dcp save ok");
    for n in [4, 3, 2] {
        let f = launch_with(&py, n, "60s", &["test_dcp.py", "load", dir.str()]);
        every_rank_says(&f, n, "dcp load ok");
    }
}
