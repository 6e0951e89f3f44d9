//! Hangs and mismatches through the real binary: a SIGSTOPped rank is named by the launcher's
//! hang diagnosis within 10 s (PHALANX_TIMEOUT=5s), and ranks that call allreduce with
//! different sizes all print both sides within 1 s. Both jobs also write flight-recorder
//! dumps (`TORCH_FR_DUMP_TEMP_FILE`), in which `phalanx fr-trace` and PyTorch's own `fr_trace`
//! (when the venv is there) name the culprit rank and collective; so do they for a PyTorch
//! program whose rank 2 skips a collective (python/tests/test_flight_recorder.py). Bad
//! flight-recorder input (a size that is no number, a dump directory that does not exist)
//! is one line each and leaves the job's result as it was.

mod launch_util;

use std::path::Path;
use std::time::{Duration, Instant};

use launch_util::{
    alive, backend_python, phalanx, rank_lines, run, start, survivors, torch_python,
    wait_for_workers, Finished, TempDir,
};

/// `phalanx fr-trace PREFIX`'s output (it must succeed).
fn fr_trace(prefix: &str) -> String {
    let mut c = phalanx();
    c.args(["fr-trace", prefix]);
    let f = run(c, Duration::from_secs(20));
    f.assert_ok();
    f.stdout
}

/// PyTorch 2.15's `python -m torch.distributed.flight_recorder.fr_trace DIR -p PREFIX ARGS`
/// (both streams), or `None` after saying why it is skipped.
fn torch_fr_trace(test: &str, dir: &Path, prefix: &str, args: &[&str]) -> Option<String> {
    let py = torch_python(test)?;
    let mut c = std::process::Command::new(py);
    c.args(["-m", "torch.distributed.flight_recorder.fr_trace"])
        .arg(dir)
        .args(["-p", prefix])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let f = run(c, Duration::from_secs(60));
    Some(format!("{}{}", f.stdout, f.stderr))
}

/// A job of `nproc` ranks in which rank 1 calls allreduce with 2048 elements, the others with
/// 1024.
fn sizes_mismatch(nproc: u32) -> std::process::Command {
    let exe = env!("CARGO_BIN_EXE_phalanx");
    let script = format!(
        "if [ \"$RANK\" = 1 ]; then exec '{exe}' bench allreduce --sizes 8K --iters 5 --warmup 0; \
         else exec '{exe}' bench allreduce --sizes 4K --iters 5 --warmup 0; fi"
    );
    let mut cmd = phalanx();
    cmd.args([
        "launch",
        "--nproc-per-node",
        &nproc.to_string(),
        "--standalone",
        "--",
    ])
    .args(["sh", "-c", &script]);
    cmd
}

/// The dump files `trace_<rank>` in `dir`, by rank.
fn dumps(dir: &Path) -> Vec<u32> {
    let mut ranks: Vec<u32> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            name.strip_prefix("trace_")?.parse().ok()
        })
        .collect();
    ranks.sort();
    ranks
}

/// Continues and kills a stopped process when the test ends, however it ends.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) calls on a pid this test stopped.
        unsafe {
            libc::kill(self.0, libc::SIGCONT);
            if alive(self.0) {
                libc::kill(self.0, libc::SIGKILL);
            }
        }
    }
}

#[test]
fn a_stopped_rank_is_named_by_the_hang_diagnosis_within_ten_seconds() {
    let dir = TempDir::new("fr-stop");
    let prefix = format!("{}/trace_", dir.str());
    let mut cmd = phalanx();
    cmd.env("PHALANX_TIMEOUT", "5s")
        .env("TORCH_FR_DUMP_TEMP_FILE", &prefix)
        .args([
            "bench",
            "allreduce",
            "--nproc-per-node",
            "3",
            "--standalone",
            "--sizes",
            "64K",
            "--iters",
            "1000000",
            "--warmup",
            "0",
        ]);
    let run = start(cmd);
    let procs = wait_for_workers(run.pid(), 3);
    // Let them get into the allreduce loop.
    std::thread::sleep(Duration::from_millis(700));
    let (victim, _) = procs.iter().copied().find(|(_, r)| *r == 1).unwrap();
    let _resume = Resume(victim);
    let stopped_at = Instant::now();
    // SAFETY: kill(2) on our grandchild.
    unsafe { libc::kill(victim, libc::SIGSTOP) };
    let f = run.wait(Duration::from_secs(30));
    let took = stopped_at.elapsed();
    let report = format!("stdout:\n{}\nstderr:\n{}", f.stdout, f.stderr);
    assert!(
        took < Duration::from_secs(10),
        "took {took:?} to diagnose\n{report}"
    );
    assert_ne!(f.code(), Some(0), "{report}");
    let diag: Vec<&str> = f
        .stderr
        .lines()
        .skip_while(|l| !l.starts_with("hang diagnosis:"))
        .collect();
    assert!(!diag.is_empty(), "no diagnosis\n{report}");
    assert_eq!(
        diag[0], "hang diagnosis: rank 1 is what the others wait for",
        "{report}"
    );
    assert!(
        diag.iter()
            .any(|l| l.starts_with("  ranks 0, 2 wait in allreduce #")
                && l.contains("for rank 1; last completed #")),
        "{report}"
    );
    assert!(
        diag.iter()
            .any(|l| l.starts_with("  rank 1 is stopped (state T")),
        "{report}"
    );
    // The diagnosis comes before the table.
    let table = f.stderr.find("local_rank  node").expect("table");
    assert!(f.stderr.find("hang diagnosis").unwrap() < table);
    // The waiting ranks' own errors name whom they waited for.
    for (r, body) in rank_lines(&f.stderr) {
        if body.starts_with("phalanx: error:") {
            assert!(r != 1 && body.contains("waiting for rank(s) [1]"), "{body}");
        }
    }
    let pids: Vec<i32> = procs.iter().map(|(p, _)| *p).collect();
    assert!(
        survivors(&pids, Duration::from_secs(2)).is_empty(),
        "workers left behind\n{report}"
    );
    eprintln!("SIGSTOP diagnosed in {took:?}");
    // The flight recorder: the waiting ranks dumped, the stopped one could not.
    assert_eq!(dumps(dir.path()), vec![0, 2], "{report}");
    let ours = fr_trace(&prefix);
    assert!(
        ours.lines()
            .any(|l| l.starts_with("  culprit: rank 1 wrote no dump")
                && l.contains("ranks 0, 2 wait in #")
                && l.contains(" all_reduce [[16384]] ['Float']")),
        "{ours}"
    );
    // PyTorch's analyser needs every member's dump to match entries; it names the missing one.
    let test = "a stopped rank (PyTorch's fr_trace)";
    if let Some(torch) = torch_fr_trace(test, dir.path(), "trace_", &["--allow-incomplete-ranks"]) {
        assert!(
            torch.contains("we missed FR dumps from ranks ({1})"),
            "{torch}"
        );
    }
}

/// A stopped rank of a model cut across ranks (`phalanx train --tp 2 --pp 2`): the launcher's
/// diagnosis names it, and `phalanx fr-trace` names it in each of its subgroups, which the
/// ranks number each in their own order (Note [Groups across dumps] in `fr_trace/groups.rs`): its
/// tensor-parallel peer waits in an all-reduce of their group.
#[test]
fn a_stopped_rank_of_a_cut_model_is_named_in_its_subgroups() {
    let dir = TempDir::new("fr-stop-mp");
    let prefix = format!("{}/trace_", dir.str());
    let mut cmd = phalanx();
    cmd.env("PHALANX_TIMEOUT", "5s")
        .env("TORCH_FR_DUMP_TEMP_FILE", &prefix)
        .args(["train", "--standalone", "--nproc-per-node", "4"])
        .args(["--model", "gpt", "--depth", "2", "--tp", "2", "--pp", "2"])
        .args(["--max-steps", "1000000"]);
    let run = start(cmd);
    let procs = wait_for_workers(run.pid(), 4);
    std::thread::sleep(Duration::from_millis(3000));
    let (victim, _) = procs.iter().copied().find(|(_, r)| *r == 3).unwrap();
    let _resume = Resume(victim);
    // SAFETY: kill(2) on our grandchild.
    unsafe { libc::kill(victim, libc::SIGSTOP) };
    let f = run.wait(Duration::from_secs(60));
    let report = format!("stdout:\n{}\nstderr:\n{}", f.stdout, f.stderr);
    assert_ne!(f.code(), Some(0), "{report}");
    assert!(
        f.stderr.contains("hang diagnosis: rank 3 stopped or stuck"),
        "{report}"
    );
    let ours = fr_trace(&prefix);
    assert!(
        ours.lines()
            .any(|l| l.starts_with("group ") && l.contains("ranks [2, 3]")),
        "{ours}"
    );
    // Rank 3 is named directly where a peer waits with it in a collective or, in their pair,
    // in an exchange (Note [Point-to-point waits] in fr_trace), and through the chain a peer
    // waits behind (Note [Waiting behind another group]): rank 0 waits in an all-reduce that
    // rank 1 never issued, behind rank 3 in their pipeline pair. Which lines a run gives
    // depends on where in the schedule SIGSTOP found rank 3.
    let named = ours
        .lines()
        .filter(|l| {
            l.starts_with("  culprit: rank 3 wrote no dump")
                || l.starts_with("  culprit: rank 3, behind which")
        })
        .count();
    assert!(named >= 1, "{ours}");
    // The ranks named, before the evidence: exactly rank 3 on every culprit line.
    let others: Vec<&str> = ours
        .lines()
        .filter_map(|l| l.split_once("culprit: ").map(|(_, c)| c))
        .filter(|c| {
            let named = c.split([',', ' ']).take(2).collect::<Vec<_>>().join(" ");
            named != "rank 3"
        })
        .collect();
    assert!(others.is_empty(), "another rank named: {others:?}\n{ours}");
}

#[test]
fn allreduce_with_different_sizes_names_both_sides_on_every_rank_within_one_second() {
    let dir = TempDir::new("fr-mismatch");
    let prefix = format!("{}/trace_", dir.str());
    let mut cmd = sizes_mismatch(3);
    cmd.env("TORCH_FR_DUMP_TEMP_FILE", &prefix);
    let f = run(cmd, Duration::from_secs(30));
    let report = format!("stdout:\n{}\nstderr:\n{}", f.stdout, f.stderr);
    assert_ne!(f.code(), Some(0), "{report}");
    assert_eq!(dumps(dir.path()), vec![0, 1, 2], "{report}");
    let ours = fr_trace(&prefix);
    assert!(
        ours.contains(
            "  culprit: rank 1 ran #0 all_reduce [[2048]] ['Float'] where ranks 0, 2 ran #0 \
             all_reduce [[1024]] ['Float']"
        ),
        "{ours}"
    );
    // PyTorch's fr_trace reads these too (`Culprit rank 1; Error type:
    // SIZE_OR_SYNTAX_MISMATCH`, docs/flight-recorder.md); the test of a PyTorch program below
    // runs it, sparing this one the ~10 s of importing torch.
    // Start-up included; the mismatch itself is found in the first collective.
    assert!(
        f.elapsed < Duration::from_secs(5),
        "took {:?}\n{report}",
        f.elapsed
    );
    let lines = rank_lines(&f.stderr);
    for r in 0..3 {
        let err = lines
            .iter()
            .find(|(n, b)| *n == r && b.starts_with("phalanx: error:"))
            .unwrap_or_else(|| panic!("rank {r} printed no error\n{report}"));
        assert!(
            err.1.contains("count=1024") && err.1.contains("count=2048"),
            "rank {r} does not name both sides: {}\n{report}",
            err.1
        );
        assert!(err.1.contains("mismatch"), "{}", err.1);
    }
    // Detection time: from the first worker's start-up to the last error line is what the
    // launcher's summary measures as "after start"; the failure is reported well under 1 s.
    let after: f64 = f
        .stderr
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("root cause: ")?;
            let (_, tail) = rest.split_once("): ")?;
            let secs = tail.strip_suffix(" s after start")?;
            secs.rsplit(' ').next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no root cause line\n{report}"));
    assert!(
        after < 1.0,
        "mismatch reported {after} s after start\n{report}"
    );
}

#[test]
fn a_pytorch_rank_that_skips_a_collective_is_named_in_the_flight_recorder_dumps() {
    let test = "a PyTorch rank that skips a collective";
    let Some(py) = backend_python(test) else {
        return;
    };
    let dir = TempDir::new("fr-skip");
    let prefix = format!("{}/trace_", dir.str());
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/tests/test_flight_recorder.py");
    let mut cmd = phalanx();
    cmd.env("PHALANX_TIMEOUT", "10s")
        .env("PHALANX_PYTHON", &py)
        .env("TORCH_FR_DUMP_TEMP_FILE", &prefix)
        .args(["launch", "--nproc-per-node", "3", "--standalone"])
        .arg(&script);
    let f = run(cmd, Duration::from_secs(60));
    let report = format!("stdout:\n{}\nstderr:\n{}", f.stdout, f.stderr);
    f.assert_ok();
    for r in 0..3 {
        assert!(f.stdout.contains(&format!("rank {r} caught: ")), "{report}");
    }
    assert_eq!(dumps(dir.path()), vec![0, 1, 2], "{report}");
    let ours = fr_trace(&prefix);
    // The backend hands broadcast its tensor's bytes, so the dumps record bytes.
    assert!(
        ours.contains(
            "  culprit: rank 2 ran #5 broadcast [[64]] ['Byte'] where ranks 0, 1 ran #5 \
             all_reduce [[16]] ['Float']"
        ),
        "{ours}"
    );
    // PyTorch's analyser takes the first dump it lists as the reference: it names rank 2, or,
    // when it starts from rank 2's dump, ranks 0 and 1 (the odd one out by elimination).
    if let Some(torch) = torch_fr_trace(test, dir.path(), "trace_", &[]) {
        let named: Vec<&str> = torch
            .lines()
            .filter_map(|l| l.strip_prefix("error msg: "))
            .collect();
        assert_eq!(named.len(), 1, "{torch}");
        let from_0 = named[0].contains("Culprit rank 2; Error type: COLLECTIVE_TYPE_MISMATCH")
            && named[0].contains("'all_reduce' does not match found collective type: 'broadcast'");
        let from_2 = ["Culprit rank 0;", "Culprit rank 1;"]
            .iter()
            .all(|c| named[0].contains(c))
            && named[0].contains("'broadcast' does not match found collective type: 'all_reduce'");
        assert!(from_0 || from_2, "{torch}");
        assert!(
            torch.contains("Collective sequence number: 5 has errors"),
            "{torch}"
        );
    }
}

#[test]
fn bad_flight_recorder_input_is_one_line_and_leaves_the_result_alone() {
    // A size that is no number: one warning per rank, the default kept, the job succeeds.
    let mut cmd = phalanx();
    cmd.env("TORCH_FR_BUFFER_SIZE", "lots").args([
        "bench",
        "allreduce",
        "--nproc-per-node",
        "2",
        "--standalone",
        "--sizes",
        "4K",
        "--iters",
        "5",
        "--warmup",
        "0",
    ]);
    let f: Finished = run(cmd, Duration::from_secs(30));
    f.assert_ok();
    let warned = f
        .stderr
        .lines()
        .filter(|l| l.contains("phalanx: warning: flight recorder: TORCH_FR_BUFFER_SIZE=\"lots\" is not a number of entries"))
        .count();
    assert_eq!(warned, 2, "{}", f.stderr);
    // A dump directory that does not exist: each rank names the path and the OS error, and
    // the job fails with the mismatch it would have failed with.
    let mut cmd = sizes_mismatch(2);
    cmd.env("TORCH_FR_DUMP_TEMP_FILE", "/nonexistent-phalanx-fr/trace_");
    let f = run(cmd, Duration::from_secs(30));
    assert_ne!(f.code(), Some(0), "{}", f.stderr);
    for r in 0..2 {
        let line = format!(
            "phalanx: warning: flight recorder: cannot write the dump \
             /nonexistent-phalanx-fr/trace_{r}: No such file or directory (os error 2)"
        );
        assert!(f.stderr.contains(&line), "no {line:?}\n{}", f.stderr);
    }
    assert!(
        f.stderr.lines().any(|l| l.starts_with("root cause: "))
            && f.stderr.contains("collective mismatch"),
        "{}",
        f.stderr
    );
}
