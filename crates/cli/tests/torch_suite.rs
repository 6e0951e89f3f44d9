//! PyTorch's own backend suite (`torch.testing._internal.distributed.distributed_test`) on the
//! `"phalanx"` backend: its collective and point-to-point tests on 3 ranks, through
//! python/tests/run_torch_suite.py, with no failure, and as many passed as with Gloo when
//! phalanx is given the tests the suite chooses for Gloo (as a plugin it skips those it
//! reserves for the backends it names). Skipped with a line saying why when no
//! Python has torch, phalanx_torch, expecttest and hypothesis (the suite imports the last two).

mod launch_util;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use launch_util::*;

/// One run of the selection takes about 40 s on 2 cores; every test has 60 s of its own.
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
    // (passed, failed) of one run of the selection.
    let suite = |args: &[&str]| -> (u32, u32, String) {
        let dir = TempDir::new("torch_suite");
        let mut c = Command::new(&py);
        clean_env(&mut c)
            .arg(&runner)
            .args(args)
            .args(["--world-size", "3"])
            .env("TEMP_DIR", dir.str())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let f = run(c, DEADLINE);
        let summary = f
            .stdout
            .lines()
            .find(|l| l.starts_with("suite "))
            .unwrap_or_else(|| panic!("no summary line\n{}\n{}", f.stdout, f.stderr))
            .to_string();
        say(&summary);
        assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
        let count = |what: &str| -> u32 {
            summary
                .split([':', ','])
                .find_map(|part| part.trim().strip_suffix(what))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {what:?} count in {summary}"))
        };
        (count(" passed"), count(" failed"), summary)
    };
    // Gloo, the reference; phalanx as a plugin (the suite skips the tests it reserves for
    // the backends it names); and phalanx given the tests chosen for Gloo.
    // The three side by side: the suite's tests mostly wait on their forked ranks (a run
    // used a fifth of one core here), and each run has a temporary directory and a
    // rendezvous port of its own.
    let [gloo, plugin, as_gloo] = std::thread::scope(|s| {
        let runs = [
            s.spawn(|| suite(&["--backend", "gloo"])),
            s.spawn(|| suite(&["--backend", "phalanx"])),
            s.spawn(|| suite(&["--backend", "phalanx", "--selected-as", "gloo"])),
        ];
        runs.map(|run| run.join().expect("a run of the suite panicked"))
    });
    let (gloo, gloo_failed, _) = gloo;
    assert_eq!(gloo_failed, 0, "Gloo itself failed tests here");
    let (plugin, plugin_failed, summary) = plugin;
    assert!(plugin > 0 && plugin_failed == 0, "{summary}");
    let (as_gloo, failed, summary) = as_gloo;
    assert_eq!(failed, 0, "{summary}");
    assert!(as_gloo >= gloo, "{summary}: fewer than Gloo's {gloo}");
}
