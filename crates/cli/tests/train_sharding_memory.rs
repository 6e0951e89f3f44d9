//! A model whose training state does not fit one rank's memory under DDP trains under
//! `--sharding full` on 4 ranks: every rank in its own memory cgroup (cgroup v1
//! `memory.limit_in_bytes`, or v2 `memory.max`; root only), the same limit for both runs. The
//! MLP 784-4096x5-10 (70 M parameters) with Adam holds 1.1 GB of training state per rank
//! under DDP and a quarter of it under `full`. Skipped, saying why, without root or a memory
//! controller.

mod launch_util;

use std::path::{Path, PathBuf};
use std::time::Duration;

use launch_util::{phalanx, run, Finished, TempDir};

/// Each rank's limit: DDP needs about 1.45 GiB here, `full` about 0.83 GiB (measured by the
/// cgroups' own `max_usage_in_bytes`, page cache included).
const LIMIT_MIB: u64 = 1100;
const RANKS: usize = 4;

/// The memory controller's root directory and whether it is cgroup v2.
fn controller() -> Result<(PathBuf, bool), String> {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return Err("not root (a memory cgroup per rank needs it)".into());
    }
    let v1 = Path::new("/sys/fs/cgroup/memory");
    if v1.join("memory.limit_in_bytes").exists() {
        return Ok((v1.to_path_buf(), false));
    }
    for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let controllers =
            std::fs::read_to_string(Path::new(root).join("cgroup.controllers")).unwrap_or_default();
        if controllers.split_whitespace().any(|c| c == "memory") {
            return Ok((root.into(), true));
        }
    }
    Err("no cgroup memory controller (v1 /sys/fs/cgroup/memory or v2 with memory)".into())
}

/// The ranks' cgroups, removed when dropped (their processes are gone by then).
struct Groups {
    dirs: Vec<PathBuf>,
    v2: bool,
}

impl Groups {
    fn new(root: &Path, v2: bool, tag: &str) -> Groups {
        let dirs = (0..RANKS)
            .map(|r| root.join(format!("phalanx-test-{}-{tag}-{r}", std::process::id())))
            .collect();
        Groups { dirs, v2 }
    }

    /// How many times the kernel killed a process of these cgroups for memory.
    fn oom_kills(&self) -> u64 {
        self.dirs
            .iter()
            .map(|d| {
                let (file, key) = match self.v2 {
                    true => ("memory.events", "oom_kill"),
                    false => ("memory.oom_control", "oom_kill"),
                };
                std::fs::read_to_string(d.join(file))
                    .unwrap_or_default()
                    .lines()
                    .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    }
}

impl Drop for Groups {
    fn drop(&mut self) {
        for d in &self.dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// `phalanx launch` of 4 ranks, each moving itself into its cgroup (`LOCAL_RANK`) with the
/// limit set, then becoming `phalanx train ARGS`.
fn train_limited(groups: &Groups, dir: &TempDir, args: &[&str]) -> Finished {
    let limit = LIMIT_MIB * 1024 * 1024;
    let prefix = groups.dirs[0]
        .to_string_lossy()
        .trim_end_matches('0')
        .to_string();
    let limit_file = match groups.v2 {
        true => "memory.max",
        false => "memory.limit_in_bytes",
    };
    let script = dir.path().join("limited.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nset -e\ncg={prefix}$LOCAL_RANK\nmkdir -p $cg\necho {limit} > $cg/{limit_file}\n\
             echo $$ > $cg/cgroup.procs\nexec {} train \"$@\"\n",
            env!("CARGO_BIN_EXE_phalanx")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut cmd = phalanx();
    cmd.args(["launch", "--standalone", "--nproc-per-node", "4", "--"])
        .arg(&script)
        .args(args);
    run(cmd, Duration::from_secs(600))
}

#[test]
fn a_model_that_does_not_fit_under_ddp_trains_under_full_sharding() {
    let (root, v2) = match controller() {
        Ok(c) => c,
        Err(why) => {
            eprintln!(
                "SKIPPED a_model_that_does_not_fit_under_ddp_trains_under_full_sharding: {why}"
            );
            return;
        }
    };
    let args = [
        "--dataset",
        "synthetic:2000",
        "--depth",
        "5",
        "--hidden",
        "4096",
        "--optimizer",
        "adam",
        "--lr",
        "0.001",
        "--batch-size",
        "8",
        "--max-steps",
        "3",
    ];
    let dir = TempDir::new("shard-memory");
    // DDP: 16 bytes per parameter on every rank; the kernel kills a rank at the limit.
    let groups = Groups::new(&root, v2, "ddp");
    let ddp = train_limited(
        &groups,
        &dir,
        &[&args[..], &["--sharding", "none"]].concat(),
    );
    assert_ne!(
        ddp.code(),
        Some(0),
        "DDP fit in {LIMIT_MIB} MiB per rank:\n{}",
        ddp.stdout
    );
    assert!(
        groups.oom_kills() > 0,
        "DDP failed, but not for memory:\n{}\n{}",
        ddp.stdout,
        ddp.stderr
    );
    assert!(ddp.stderr.contains("SIGKILL"), "{}", ddp.stderr);
    drop(groups);
    // Full sharding: a quarter of it, plus the blocks being computed.
    let groups = Groups::new(&root, v2, "full");
    let full = train_limited(
        &groups,
        &dir,
        &[&args[..], &["--sharding", "full"]].concat(),
    );
    assert_eq!(
        full.code(),
        Some(0),
        "--sharding full in {LIMIT_MIB} MiB per rank:\n{}\n{}",
        full.stdout,
        full.stderr
    );
    assert_eq!(groups.oom_kills(), 0);
    assert!(full.stdout.contains("done: "), "{}", full.stdout);
}
