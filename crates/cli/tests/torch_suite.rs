//! PyTorch's own backend suite (`torch.testing._internal.distributed.distributed_test`) on the
//! `"phalanx"` backend: its collective and point-to-point tests on 3 ranks, through
//! python/tests/run_torch_suite.py, with no failure. Skipped with a line saying why when no
//! Python has torch, phalanx_torch, expecttest and hypothesis (the suite imports the last two).

mod launch_util;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use launch_util::*;

/// The selection takes about 30 s on 2 cores; every test has 60 s of its own.
const DEADLINE: Duration = Duration::from_secs(600);

#[test]
fn pytorch_backend_suite_collectives_and_point_to_point_pass_on_3_ranks() {
    let test = "pytorch_backend_suite_collectives_and_point_to_point_pass_on_3_ranks";
    let Some(py) = torch_python(test) else {
        return;
    };
    let ok = Command::new(&py)
        .args(["-c", "import phalanx_torch, expecttest, hypothesis"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        say(&format!(
            "SKIPPED {test}: {} lacks phalanx_torch, expecttest or hypothesis (`pip install \
             ./python expecttest hypothesis`)",
            py.display()
        ));
        return;
    }
    let runner =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/tests/run_torch_suite.py");
    let dir = TempDir::new("torch_suite");
    let mut c = Command::new(&py);
    clean_env(&mut c)
        .arg(runner)
        .args(["--backend", "phalanx", "--world-size", "3"])
        .env("TEMP_DIR", dir.str())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let f = run(c, DEADLINE);
    let summary = f
        .stdout
        .lines()
        .find(|l| l.starts_with("suite phalanx"))
        .unwrap_or_else(|| panic!("no summary line\n{}\n{}", f.stdout, f.stderr))
        .to_string();
    say(&summary);
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    assert!(summary.contains(" 0 failed"), "{summary}\n{}", f.stdout);
    let passed: u32 = summary
        .split(": ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(passed > 0, "{summary}");
}
