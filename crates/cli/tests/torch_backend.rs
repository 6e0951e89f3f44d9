//! The `"phalanx"` torch.distributed backend (python/, `pip install ./python`) with real torch,
//! through the real launcher: python/tests/test_backend.py (every collective, dtype and op
//! against references) on 1–4 ranks, test_ddp.py (DDP equals whole-batch training, replicas
//! bitwise equal), test_failure.py and test_timeout.py (PhalanxError naming the culprit).
//! Skipped with a line saying why when no Python has torch and phalanx_torch (.ci/run installs
//! both).

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

fn launch(py: &Path, nproc: u32, name: &str) -> Finished {
    let mut c = phalanx();
    c.env("PHALANX_PYTHON", py)
        .env("PHALANX_TIMEOUT", "2s")
        .args([
            "launch",
            "--standalone",
            "--nproc-per-node",
            &nproc.to_string(),
        ])
        .arg(script(name));
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
        let f = launch(&py, n, "test_backend.py");
        every_rank_says(&f, n, "phalanx backend ok");
    }
}

#[test]
fn ddp_over_phalanx_equals_whole_batch_training() {
    let Some(py) = backend_python("ddp_over_phalanx_equals_whole_batch_training") else {
        return;
    };
    for n in [2, 3] {
        let f = launch(&py, n, "test_ddp.py");
        every_rank_says(&f, n, "ddp over phalanx ok");
    }
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
