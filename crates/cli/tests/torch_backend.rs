//! The `"phalanx"` torch.distributed backend (python/, `pip install ./python`) with real torch,
//! through the real launcher: python/tests/test_backend.py (every collective, dtype and op
//! against references) on 1–4 ranks, test_ddp.py (DDP equals whole-batch training, replicas
//! bitwise equal), test_failure.py and test_timeout.py (PhalanxError naming the culprit),
//! test_fsdp2.py (FSDP2 over phalanx equals FSDP2 over Gloo), test_mesh.py (DeviceMesh and
//! DTensor; groups named as Gloo's are), test_tp_pp.py (PyTorch's tensor parallelism and
//! pipelining train bitwise as over Gloo), test_diloco.py (`phalanx_torch.diloco`, DiLoCo
//! across islands, bitwise as over Gloo), test_diloco_ft.py (its islands leaving and joining
//! under `--fault-tolerance`) and test_dcp.py (torch.distributed.checkpoint across world
//! sizes). Skipped with a line saying why when no Python has torch and phalanx_torch
//! (.ci/run installs both).

mod launch_util;

use std::path::Path;
use std::time::Duration;

use launch_util::*;

const DEADLINE: Duration = Duration::from_secs(180);

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
    launch_flags(py, nproc, timeout, &[], &[], script_and_args)
}

/// [`launch_with`], with these variables set for the workers and these flags for
/// `phalanx launch`.
fn launch_flags(
    py: &Path,
    nproc: u32,
    timeout: &str,
    env: &[(&str, &str)],
    flags: &[&str],
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
        .args(flags)
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
    let _busy = one_at_a_time();
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
    let _busy = one_at_a_time();
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
    let f = launch_flags(&py, 2, "30s", &detail, &[], &["test_ddp.py"]);
    every_rank_says(&f, 2, "ddp over phalanx ok");
}

/// `phalanx_torch.diloco.DiLoCo` (torchft's semantics) on 4 ranks in 2 islands: local SGD is
/// the islands' mean, DiLoCo's Nesterov steps end equal on every rank, and the parameters are
/// bitwise gloo's.
#[test]
fn diloco_over_phalanx_ends_equal_everywhere_as_over_gloo() {
    let _busy = one_at_a_time();
    let Some(py) = backend_python("diloco_over_phalanx_ends_equal_everywhere_as_over_gloo") else {
        return;
    };
    let mut digests = Vec::new();
    for backend in ["phalanx", "gloo"] {
        let f = launch_with(&py, 4, "30s", &["test_diloco.py", backend]);
        every_rank_says(&f, 4, "diloco ok");
        digests.extend(
            rank_lines(&f.stdout)
                .into_iter()
                .filter_map(|(_, l)| Some(l.split("diloco ok digest ").nth(1)?.to_string())),
        );
    }
    assert_eq!(digests.len(), 8, "{digests:?}");
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
}

#[test]
fn failures_are_python_exceptions_naming_the_culprit() {
    let _busy = one_at_a_time();
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
    let _busy = one_at_a_time();
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
    let _busy = one_at_a_time();
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
    let _busy = one_at_a_time();
    let Some(py) = backend_python("dcp_checkpoint_saved_at_4_ranks_loads_at_4_3_and_2") else {
        return;
    };
    let dir = TempDir::new("dcp_checkpoint_saved_at_4_ranks_loads_at_4_3_and_2");
    // Saved and loaded again at 4 in the same processes (one start of torch and its DCP,
    // about 5 CPU-s a process, instead of two), then loaded by new processes at 3 and 2.
    let f = launch_with(&py, 4, "60s", &["test_dcp.py", "save,load", dir.str()]);
    every_rank_says(&f, 4, "dcp save ok");
    every_rank_says(&f, 4, "dcp load ok");
    for n in [3, 2] {
        let f = launch_with(&py, n, "60s", &["test_dcp.py", "load", dir.str()]);
        every_rank_says(&f, n, "dcp load ok");
    }
}

/// PyTorch's own tensor parallelism (`parallelize_module`: a GPT block's attention and MLP by
/// columns then rows) and pipelining (`PipelineStage`, GPipe and 1F1B, 2 stages of 4
/// microbatches) train 30 steps over phalanx bitwise as over Gloo in the same processes
/// (python/tests/test_tp_pp.py); each run is timed against Gloo's, and the times are said.
#[test]
fn pytorch_tensor_parallelism_and_pipelining_over_phalanx_equal_gloo() {
    let _busy = one_at_a_time();
    let Some(py) =
        backend_python("pytorch_tensor_parallelism_and_pipelining_over_phalanx_equal_gloo")
    else {
        return;
    };
    let f = launch_with(&py, 2, "60s", &["test_tp_pp.py"]);
    every_rank_says(&f, 2, "tp and pp over phalanx ok");
    for what in ["tp", "pp gpipe", "pp 1f1b"] {
        every_rank_says(&f, 2, &format!("{what} over 2 ranks: "));
        let equal = rank_lines(&f.stdout)
            .into_iter()
            .filter(|(_, l)| l.contains(&format!("{what} over 2 ranks: ")))
            .all(|(_, l)| l.contains("bitwise equal to gloo's"));
        assert!(equal, "{}", f.stdout);
    }
    for (_, line) in rank_lines(&f.stdout) {
        if line.contains(": time ") {
            say(&line);
        }
    }
}

/// The `result slot S … accuracy A digest D world W restart R` line of each rank, by slot.
fn results(f: &Finished) -> Vec<(u32, f64, String, String)> {
    let mut out: Vec<(u32, f64, String, String)> = f
        .stdout
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = w.iter().position(|&x| x == "result")?;
            let field = |name: &str| {
                let i = w[at..].iter().position(|&x| x == name)?;
                w.get(at + i + 1).map(|v| v.to_string())
            };
            Some((
                field("slot")?.parse().ok()?,
                field("accuracy")?.parse().ok()?,
                field("digest")?,
                format!("world {} restart {}", field("world")?, field("restart")?),
            ))
        })
        .collect();
    out.sort_by_key(|r| r.0);
    out
}

/// The seconds after `at` in a line `… <what> <seconds since the epoch>` of each rank.
fn stamps(f: &Finished, what: &str) -> Vec<(u32, f64)> {
    rank_lines(&f.stdout)
        .into_iter()
        .filter_map(|(r, l)| Some((r, l.strip_prefix(what)?.trim().parse().ok()?)))
        .collect()
}

/// Of a run of 3 ranks whose rank 1 printed `kill at T` and died: ranks 0 and 2 printed `first
/// <what> after the failure done at T'`, each within a second of the kill.
fn survivors_go_on_within_a_second(f: &Finished, what: &str) {
    let dump = format!("{}\n{}", f.stdout, f.stderr);
    let kill = stamps(f, "kill at");
    assert_eq!(kill.len(), 1, "{dump}");
    let next = stamps(f, &format!("first {what} after the failure done at"));
    let mut survivors: Vec<u32> = next.iter().map(|&(r, _)| r).collect();
    survivors.sort_unstable();
    assert_eq!(survivors, [0, 2], "{dump}");
    for (r, t) in &next {
        let took = t - kill[0].1;
        say(&format!(
            "rank {r}: kill -> its next {what} completed in {took:.3} s"
        ));
        assert!(
            (0.0..1.0).contains(&took),
            "rank {r} took {took:.3} s\n{dump}"
        );
    }
}

#[test]
fn a_ddp_loop_through_phalanx_torch_ft_survives_a_sigkilled_rank() {
    let _busy = one_at_a_time();
    let Some(py) = backend_python("a_ddp_loop_through_phalanx_torch_ft_survives_a_sigkilled_rank")
    else {
        return;
    };
    let ft = ["--fault-tolerance", "--max-restarts", "1"];
    // With the API: rank 1 dies before step 60 of 300; the others go on, its replacement
    // joins them (steps take 0.25 s while the group is short, so it joins before the end: a
    // replacement that needed more than the 12 s of the old 50 ms steps, importing torch while
    // CI built beside the tests, found the run over).
    let started = std::time::Instant::now();
    let api = [
        "test_ft.py",
        "api",
        "--steps",
        "300",
        "--kill-at",
        "60",
        "--hold-for-join",
    ];
    let f = launch_flags(&py, 3, "30s", &[], &ft, &api);
    let api_s = started.elapsed().as_secs_f64();
    let dump = format!("{}\n{}", f.stdout, f.stderr);
    assert_eq!(f.code(), Some(0), "{dump}");
    survivors_go_on_within_a_second(&f, "step");
    // The replacement took its state from a peer (the others handed it over at a boundary).
    assert!(
        f.stdout
            .contains("[rank 1]: recovery joined generation 2 members [0, 1, 2]"),
        "{dump}"
    );
    assert!(
        f.stdout
            .contains("[rank 0]: recovery regrouped generation 1 members [0, 2]"),
        "{dump}"
    );
    let ours = results(&f);
    assert_eq!(ours.len(), 3, "{dump}");
    assert!(
        ours.iter()
            .all(|r| r.2 == ours[0].2 && r.3 == "world 3 restart 0"),
        "replicas differ: {ours:?}"
    );
    // Within noise of the undisturbed run (the same steps on the whole batch, which slot 0
    // replays in process): 300 test digits, a few of them either way.
    let undisturbed: Vec<f64> = rank_lines(&f.stdout)
        .into_iter()
        .filter_map(|(_, l)| l.strip_prefix("undisturbed accuracy")?.trim().parse().ok())
        .collect();
    assert_eq!(undisturbed.len(), 1, "{dump}");
    let (a, b) = (ours[0].1, undisturbed[0]);
    assert!(
        (a - b).abs() <= 0.03,
        "accuracy {a} against {b} undisturbed"
    );
    assert!(b > 0.85, "the undisturbed run did not learn: {b}");
    // Without the API the same kill restarts the group (the launcher finds no word from the
    // program that it re-forms its group), which then trains from scratch.
    let started = std::time::Instant::now();
    // Two ranks are enough to show it and start faster.
    let plain = ["test_ft.py", "plain", "--steps", "30", "--kill-at", "10"];
    let g = launch_flags(&py, 2, "30s", &[], &ft, &plain);
    let plain_s = started.elapsed().as_secs_f64();
    let dump = format!("{}\n{}", g.stdout, g.stderr);
    assert_eq!(g.code(), Some(0), "{dump}");
    assert!(g.stderr.contains("restart 1 of --max-restarts 1"), "{dump}");
    let theirs = results(&g);
    assert_eq!(theirs.len(), 2, "{dump}");
    assert!(
        theirs
            .iter()
            .all(|r| r.2 == theirs[0].2 && r.3 == "world 2 restart 1"),
        "{theirs:?}"
    );
    say(&format!(
        "test accuracy with the API and a kill {a:.4}, undisturbed {b:.4}; runs took \
         {api_s:.1} s and {plain_s:.1} s"
    ));
}

/// `phalanx_torch.diloco.DiLoCo(fault_tolerance=True)` (Note [Islands that come and go]): 3
/// islands of one rank, rank 1 SIGKILLed between two outer syncs; the others redo the next
/// sync without it, within a second of the kill, the replacement joins at a later sync with
/// a peer's global parameters and outer state, and every island ends on the same parameters;
/// again with the replacement ready before that next sync, which it then takes part in, the
/// model synced in two fragments in bfloat16.
#[test]
fn diloco_islands_through_phalanx_torch_ft_survive_a_sigkilled_island() {
    let _busy = one_at_a_time();
    let Some(py) =
        backend_python("diloco_islands_through_phalanx_torch_ft_survive_a_sigkilled_island")
    else {
        return;
    };
    let ft = ["--fault-tolerance", "--max-restarts", "1"];
    let run = [
        "test_diloco_ft.py",
        "--steps",
        "150",
        "--sync-every",
        "5",
        "--kill-at",
        "42",
    ];
    let f = launch_flags(&py, 3, "30s", &[], &ft, &run);
    let dump = format!("{}\n{}", f.stdout, f.stderr);
    assert_eq!(f.code(), Some(0), "{dump}");
    survivors_go_on_within_a_second(&f, "sync");
    assert!(
        f.stdout
            .contains("[rank 0]: recovery regrouped generation 1 members [0, 2]")
            && f.stdout
                .contains("[rank 1]: recovery joined generation 2 members [0, 1, 2]"),
        "{dump}"
    );
    let ends = island_ends(&f, "syncs 30 islands 3 ");
    // Undisturbed, the same run ends at 0.82 here; chance is 0.1.
    assert!(ends[0].1 > 0.7, "the islands did not learn: {ends:?}");
    // The replacement ready before the others' next sync (they hold it until its join is
    // recorded): they re-form with it, and it takes part in that very sync. The model syncs
    // in 2 fragments, one every 5 steps, in bfloat16: 20 syncs and, at the end, fragment 0's
    // (moved since step 95).
    let run = [
        "test_diloco_ft.py",
        "--steps",
        "100",
        "--sync-every",
        "10",
        "--fragments",
        "2",
        "--bf16",
        "--kill-at",
        "42",
        "--join-in-sync",
    ];
    let f = launch_flags(&py, 3, "30s", &[], &ft, &run);
    let dump = format!("{}\n{}", f.stdout, f.stderr);
    assert_eq!(f.code(), Some(0), "{dump}");
    assert!(
        f.stdout
            .contains("[rank 0]: recovery regrouped generation 2 members [0, 1, 2] at sync 8")
            && f.stdout
                .contains("[rank 1]: recovery joined generation 2 members [0, 1, 2] at sync 8"),
        "{dump}"
    );
    island_ends(&f, "syncs 21 islands 3 ");
}

/// The `result` lines of test_diloco_ft.py, one per island: (slot, accuracy, "syncs S islands
/// I digest D"), which must be 3, alike, and start with `expected`.
fn island_ends(f: &Finished, expected: &str) -> Vec<(u32, f64, String)> {
    let mut ends: Vec<(u32, f64, String)> = rank_lines(&f.stdout)
        .into_iter()
        .filter_map(|(_, l)| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.first() != Some(&"result") {
                return None;
            }
            let field = |k: &str| {
                let at = w.iter().position(|&x| x == k)?;
                w.get(at + 1).copied()
            };
            let rest = format!(
                "syncs {} islands {} digest {}",
                field("syncs")?,
                field("islands")?,
                field("digest")?
            );
            Some((
                field("slot")?.parse().ok()?,
                field("accuracy")?.parse().ok()?,
                rest,
            ))
        })
        .collect();
    ends.sort_by_key(|e| e.0);
    assert_eq!(ends.len(), 3, "{}\n{}", f.stdout, f.stderr);
    assert!(
        ends.iter().all(|e| e.2 == ends[0].2) && ends[0].2.starts_with(expected),
        "islands differ at the end: {ends:?}"
    );
    ends
}

#[test]
fn shrink_group_over_phalanx_leaves_the_ranks_left_a_smaller_named_group() {
    let _busy = one_at_a_time();
    let Some(py) =
        backend_python("shrink_group_over_phalanx_leaves_the_ranks_left_a_smaller_named_group")
    else {
        return;
    };
    let f = launch_checks(&py, 3, "test_shrink.py");
    assert_eq!(f.code(), Some(0), "{}\n{}", f.stdout, f.stderr);
    let ok: Vec<u32> = rank_lines(&f.stdout)
        .into_iter()
        .filter(|(_, l)| l.contains("shrink_group over phalanx ok") && l.contains("size 2"))
        .map(|(r, _)| r)
        .collect();
    assert_eq!(ok.len(), 2, "{}\n{}", f.stdout, f.stderr);
}
