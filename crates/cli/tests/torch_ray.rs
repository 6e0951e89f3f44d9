//! Ray Train over backend "phalanx", on a real local Ray cluster (python/tests/test_ray.py):
//! `TorchTrainer` with `TorchConfig(backend="phalanx")` and a `worker_process_setup_hook`
//! importing `phalanx_torch`, the seed MLP on 2 workers, parameters bitwise equal to gloo's;
//! and rank 1 SIGKILLed mid-run: rank 0 raises phalanx's error naming rank 1, `fit()` fails
//! instead of hanging. The driver's `ray.shutdown()` is bounded (Ray's own cleanup has hung
//! on a loaded machine after every check had passed), and the cluster runs in a session of its
//! own, so no Ray process outlives the test. Skipped with a line saying why without torch, phalanx_torch or
//! `ray[train]` (.ci/run installs all three).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use phalanx_testing::process::{clean_env, run_session, say, torch_python};

const DEADLINE: Duration = Duration::from_secs(300);

fn ray_python(test: &str) -> Option<std::path::PathBuf> {
    let py = torch_python(test)?;
    let ok = Command::new(&py)
        .args(["-c", "import phalanx_torch, ray.train.torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        say(&format!(
            "SKIPPED {test}: phalanx_torch or ray[train] is not installed in {} (.ci/run \
             installs both)",
            py.display()
        ));
        return None;
    }
    Some(py)
}

fn test_ray(py: &Path, modes: &[&str]) -> phalanx_testing::process::Finished {
    let mut c = Command::new(py);
    clean_env(&mut c)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/tests/test_ray.py"))
        .args(modes)
        // Ray's own usage reporting and dashboard stay off; nothing leaves the machine.
        .env("RAY_USAGE_STATS_ENABLED", "0")
        .env("RAY_DEDUP_LOGS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Ray's daemons (GCS, raylet, its actors) are the driver's descendants, some in process
    // groups of their own but all in its session: whatever Ray leaves behind is killed.
    run_session(c, DEADLINE, Duration::from_secs(15))
}

/// Both modes in one test and on one Ray cluster (its start and shutdown cost tens of seconds
/// on a 2-core machine): the killed worker's fit comes after the equal one, so the cluster it
/// runs on has already trained twice, as a user's long-lived cluster has.
#[test]
fn ray_train_over_phalanx_equals_gloo_and_names_a_killed_worker() {
    let Some(py) = ray_python("ray_train_over_phalanx_equals_gloo_and_names_a_killed_worker")
    else {
        return;
    };
    let f = test_ray(&py, &["equal", "kill"]);
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    assert!(f.stdout.contains("RAY OK equal"), "{}", f.stdout);
    assert!(f.stdout.contains("RAY OK kill"), "{}", f.stdout);
    // What rank 0 raised: phalanx's error, naming the rank that died.
    let seen = f
        .stdout
        .lines()
        .find(|l| l.starts_with("rank 0 saw"))
        .unwrap_or_default();
    assert!(
        seen.contains("PhalanxError") && seen.contains("rank 1 (process"),
        "{seen}"
    );
}
