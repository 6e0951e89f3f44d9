//! Every collective of the MPI backend on real MPI processes: this test runs itself under
//! `mpirun -np 3` (the child ranks see `MPI_COLLECTIVES_CHILD`), and each rank checks
//! allreduce (every dtype, Avg on integers and bf16), broadcast, allgather, reduce_scatter,
//! send/recv around a ring, async Work in issue order, barrier, and the refusal of what the
//! backend does not offer (reduce, all_to_all, batches, subgroups). Without Open MPI's
//! `mpirun` it prints why it skips. Built only with the `mpi` feature.
#![cfg(feature = "mpi")]

use std::{
    os::unix::process::CommandExt,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use half::bf16;
use phalanx_core::ReduceOp;
use phalanx_testing::process::test_path;

const CHILD: &str = "MPI_COLLECTIVES_CHILD";
const NP: usize = 3;

#[test]
fn every_collective_on_mpi() {
    if std::env::var_os(CHILD).is_some() {
        return rank_checks();
    }
    let version = Command::new("mpirun").arg("--version").output();
    match &version {
        Ok(o) if String::from_utf8_lossy(&o.stdout).contains("Open MPI") => {}
        _ => {
            eprintln!("every_collective_on_mpi: skipped: no Open MPI mpirun on PATH");
            return;
        }
    }
    let mut cmd = Command::new("mpirun");
    cmd.args([
        "-np",
        &NP.to_string(),
        "--oversubscribe",
        "--allow-run-as-root",
    ])
    .args(["-x", &format!("{CHILD}=1")])
    .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    .arg(std::env::current_exe().unwrap())
    .args([
        "--exact",
        &test_path(module_path!(), "every_collective_on_mpi"),
        "--nocapture",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    // Its own session, so that a hung job is killed whole (ranks included) at the deadline.
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let sid = child.id() as i32;
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(120) {
            // SAFETY: signals to the session this test started.
            unsafe { libc::kill(-sid, libc::SIGKILL) };
            kill_session(sid);
            let _ = child.wait();
            panic!("mpirun still running after 120 s; killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ctx = format!(
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{ctx}");
    for r in 0..NP {
        assert!(
            stdout.contains(&format!("rank {r}/{NP}: every collective ok")),
            "{ctx}"
        );
    }
}

fn kill_session(sid: i32) {
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // After the parenthesised name: state, ppid, pgrp, session.
        let session = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().nth(3));
        if session == Some(sid.to_string().as_str()) {
            // SAFETY: a signal to a process of the session this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// One rank's checks; panics (and so fails mpirun's exit status) on any wrong value.
fn rank_checks() {
    let pg = phalanx_pg::init_mpi().unwrap();
    let (r, n) = (pg.rank(), pg.world_size());
    assert_eq!(n, NP);
    let tri = (n * (n + 1) / 2) as f64;

    // allreduce: every dtype; Avg divides after the sum, integers included.
    let mut f = vec![(r + 1) as f32; 1001];
    pg.allreduce(&mut f, ReduceOp::Sum).unwrap();
    assert!(f.iter().all(|v| f64::from(*v) == tri));
    let mut d = [(r + 1) as f64, -(r as f64)];
    pg.allreduce(&mut d, ReduceOp::Min).unwrap();
    assert_eq!(d, [1.0, -((n - 1) as f64)]);
    let mut i = [(r as i64 + 1) * 10; 5];
    pg.allreduce(&mut i, ReduceOp::Avg).unwrap();
    assert_eq!(i, [tri as i64 * 10 / n as i64; 5]);
    let mut u = [r as u8 + 1];
    pg.allreduce(&mut u, ReduceOp::Max).unwrap();
    assert_eq!(u, [n as u8]);
    let mut h = vec![bf16::from_f32((r + 1) as f32); 7];
    pg.allreduce(&mut h, ReduceOp::Sum).unwrap();
    assert!(h.iter().all(|v| f64::from(v.to_f32()) == tri), "{h:?}");
    let mut p = [2i32];
    pg.allreduce(&mut p, ReduceOp::Product).unwrap();
    // Bitwise ops map onto MPI_BAND/BOR/BXOR.
    let mut bits = [1i32 << r, 0b1000 | (1 << r)];
    pg.allreduce(&mut bits, ReduceOp::BOr).unwrap();
    assert_eq!(bits, [(1 << n) - 1, 0b1000 | ((1 << n) - 1)]);
    pg.allreduce(&mut bits[1..], ReduceOp::BAnd).unwrap();
    assert_eq!(bits[1], 0b1000 | ((1 << n) - 1));
    assert_eq!(p, [1 << n]);
    let mut empty: [f32; 0] = [];
    pg.allreduce(&mut empty, ReduceOp::Sum).unwrap();

    // broadcast from the last rank.
    let mut b = vec![r as i32; 100];
    pg.broadcast(&mut b, n - 1).unwrap();
    assert!(b.iter().all(|v| *v == (n - 1) as i32));

    // allgather: block k holds rank k's values.
    let send = [r as f32, 10.0 + r as f32];
    let mut all = vec![0f32; 2 * n];
    pg.allgather(&send, &mut all).unwrap();
    let want: Vec<f32> = (0..n).flat_map(|k| [k as f32, 10.0 + k as f32]).collect();
    assert_eq!(all, want);

    // reduce_scatter: block k of the sum lands on rank k; bf16 through f32; Avg.
    let mut rs: Vec<f64> = (0..2 * n).map(|j| (j + r) as f64).collect();
    let mut mine = [0f64; 2];
    pg.reduce_scatter(&mut rs, &mut mine, ReduceOp::Sum)
        .unwrap();
    let sum_at = |j: usize| (0..n).map(|k| (j + k) as f64).sum::<f64>();
    assert_eq!(mine, [sum_at(2 * r), sum_at(2 * r + 1)]);
    let mut hs = vec![bf16::from_f32(3.0 * (r + 1) as f32); n];
    let mut hm = [bf16::ZERO];
    pg.reduce_scatter(&mut hs, &mut hm, ReduceOp::Avg).unwrap();
    assert_eq!(hm[0].to_f32(), (3.0 * tri / n as f64) as f32);

    // send/recv around the ring, with tags; even ranks send first.
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    let out = [r as i64 * 7; 3];
    let mut got = [0i64; 3];
    if r % 2 == 0 {
        pg.send(&out, next, 5).unwrap();
        pg.recv(&mut got, prev, 5).unwrap();
    } else {
        pg.recv(&mut got, prev, 5).unwrap();
        pg.send(&out, next, 5).unwrap();
    }
    assert_eq!(got, [prev as i64 * 7; 3]);

    // async Work runs in issue order on the worker thread, then a blocking call after it.
    let works: Vec<_> = (0..4)
        .map(|k| pg.allreduce_async(vec![(k * 10 + r) as f32; 64], ReduceOp::Sum))
        .collect();
    let mut after = [1f32];
    pg.allreduce(&mut after, ReduceOp::Sum).unwrap();
    assert_eq!(after, [n as f32]);
    for (k, w) in works.into_iter().enumerate() {
        let v = w.wait().unwrap();
        let want = (0..n).map(|q| (k * 10 + q) as f32).sum::<f32>();
        assert!(v.iter().all(|x| *x == want), "work {k}: {v:?}");
    }
    pg.barrier().unwrap();

    // What the MPI backend does not offer is refused at the call, naming it and the backend,
    // and the group goes on.
    let mut b = [1f32; 3];
    let e = pg.reduce(&mut b, ReduceOp::Sum, 0).unwrap_err().to_string();
    assert!(
        e.contains("reduce is not offered by the mpi backend"),
        "{e}"
    );
    let e = pg.all_to_all(&[1f32; 3], &mut b).unwrap_err().to_string();
    assert!(
        e.contains("all_to_all is not offered by the mpi backend"),
        "{e}"
    );
    let ops = vec![phalanx_pg::P2POp::Send {
        buf: vec![1u8],
        peer: next,
        tag: 0,
    }];
    let e = pg.batch_isend_irecv(ops).wait().unwrap_err().to_string();
    assert!(
        e.contains("batch_isend_irecv is not offered by the MPI backend"),
        "{e}"
    );
    let e = phalanx_pg::new_group(&pg, &[0, 1]).unwrap_err().to_string();
    assert!(
        e.contains("new_group is not offered by the mpi backend"),
        "{e}"
    );
    pg.barrier().unwrap();
    println!("rank {r}/{n}: every collective ok");
    // Dropping the group finalises MPI.
    drop(pg);
}
