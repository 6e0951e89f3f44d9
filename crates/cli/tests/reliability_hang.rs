//! Hangs and mismatches through the real binary: a SIGSTOPped rank is named by the launcher's
//! hang diagnosis within 10 s (PHALANX_TIMEOUT=5s), and ranks that call allreduce with
//! different sizes all print both sides within 1 s.

mod launch_util;

use std::time::{Duration, Instant};

use launch_util::{alive, phalanx, rank_lines, run, start, survivors, wait_for_workers};

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
    let mut cmd = phalanx();
    cmd.env("PHALANX_TIMEOUT", "5s").args([
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
}

#[test]
fn allreduce_with_different_sizes_names_both_sides_on_every_rank_within_one_second() {
    let exe = env!("CARGO_BIN_EXE_phalanx");
    let script = format!(
        "if [ \"$RANK\" = 1 ]; then exec '{exe}' bench allreduce --sizes 8K --iters 5 --warmup 0; \
         else exec '{exe}' bench allreduce --sizes 4K --iters 5 --warmup 0; fi"
    );
    let mut cmd = phalanx();
    cmd.args(["launch", "--nproc-per-node", "3", "--standalone", "--"])
        .args(["sh", "-c", &script]);
    let f = run(cmd, Duration::from_secs(30));
    let report = format!("stdout:\n{}\nstderr:\n{}", f.stdout, f.stderr);
    assert_ne!(f.code(), Some(0), "{report}");
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
