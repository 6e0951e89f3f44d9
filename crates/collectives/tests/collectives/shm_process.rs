//! Shared-memory collectives between real processes (this test binary re-executed as rank 1):
//! allreduce bitwise against a sequential fold in the canonical order, on the small and
//! chunked paths; broadcast, allgather and all_to_all element by element, through the shared
//! buffers and with single copies from the peer's memory (Note [Single copy]) where the
//! kernel allows it.

use std::{
    process::{Child, Command},
    time::{Duration, Instant},
};

use phalanx_collectives::{
    all_to_all_shm, allgather_shm, allreduce_shm, broadcast_shm, kernels::reduce_into, segments,
};
use phalanx_core::ReduceOp;
use phalanx_transport::shm::{ShmGroup, ShmSegment};
use phalanx_transport::CollectiveKind;

const CHILD_ENV: &str = "SHM_PROCESS_TEST_CHILD_JOB";
const BUFFER: usize = 64 * 1024;
/// From one element to several chunks of the 64 KiB buffers.
const COUNTS: [usize; 4] = [1, 1000, 100_003, 1 << 20];

fn input(rank: usize, count: usize) -> Vec<f32> {
    (0..count)
        .map(|i| ((i * 31 + rank * 7) % 997) as f32 / 97.0 - 5.0 + rank as f32 * 0.3)
        .collect()
}

fn expected(count: usize) -> Vec<f32> {
    let xs: Vec<Vec<f32>> = (0..2).map(|r| input(r, count)).collect();
    let mut out = vec![0f32; count];
    for s in 0..2 {
        let seg = segments::segment(count, 2, s);
        let mut order = segments::canonical_order(2, s);
        out[seg.clone()].copy_from_slice(&xs[order.next().unwrap()][seg.clone()]);
        for p in order {
            reduce_into(ReduceOp::Avg, &mut out[seg.clone()], &xs[p][seg.clone()]);
        }
    }
    phalanx_collectives::kernels::finish(ReduceOp::Avg, &mut out, 2);
    out
}

fn group(job: &str, rank: usize) -> ShmGroup {
    let bytes = ShmGroup::segment_bytes(BUFFER);
    let own = ShmSegment::create(&format!("{job}-{rank}"), bytes).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let peer = 1 - rank;
    let theirs = loop {
        match ShmSegment::open(&format!("{job}-{peer}"), bytes) {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => panic!("rank {peer} never appeared: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    let mut peers = vec![None, None];
    peers[peer] = Some(theirs);
    ShmGroup::new(rank, 2, own, peers, Duration::from_secs(30)).unwrap()
}

/// Both ranks run this, through the shared buffers and then with single copies where the
/// group can; returns the cases whose results were wrong.
fn run(job: &str, rank: usize) -> Vec<String> {
    let mut bad = Vec::new();
    for single in [false, true] {
        let mut g = group(&format!("{job}-{single}"), rank).with_single_copy(single);
        let mode = if g.single_copy() {
            "single copy"
        } else {
            "shared buffers"
        };
        if single && !g.single_copy() {
            eprintln!("single copies are not available here (process_vm_readv refused)");
        }
        for (seq, count) in COUNTS.into_iter().enumerate() {
            let seq = 4 * seq as u64;
            let mut buf = input(rank, count);
            allreduce_shm(&mut g, seq, &mut buf, ReduceOp::Avg).unwrap();
            if bytemuck::cast_slice::<f32, u8>(&buf)
                != bytemuck::cast_slice::<f32, u8>(&expected(count))
            {
                bad.push(format!("allreduce count {count} rank {rank} ({mode})"));
            }
            let mut b = input(rank, count);
            broadcast_shm(&mut g, seq + 1, &mut b, 1).unwrap();
            if b != input(1, count) {
                bad.push(format!("broadcast count {count} rank {rank} ({mode})"));
            }
            let mut all = vec![0f32; 2 * count];
            let kind = CollectiveKind::Allgather;
            allgather_shm(
                &mut g,
                seq + 2,
                &input(rank, count),
                &mut all,
                &[0, count, 2 * count],
                kind,
            )
            .unwrap();
            if all != [input(0, count), input(1, count)].concat() {
                bad.push(format!("allgather count {count} rank {rank} ({mode})"));
            }
            // Block p of rank q's send is input(2q + p + 2).
            let send = [input(2 * rank + 2, count), input(2 * rank + 3, count)].concat();
            let mut recv = vec![0f32; 2 * count];
            all_to_all_shm(&mut g, seq + 3, &send, &mut recv).unwrap();
            if recv != [input(rank + 2, count), input(rank + 4, count)].concat() {
                bad.push(format!("all_to_all count {count} rank {rank} ({mode})"));
            }
        }
    }
    bad
}

/// The child side of `two_processes_agree_bitwise`: does nothing unless started by it.
#[test]
fn child_rank() {
    if let Ok(job) = std::env::var(CHILD_ENV) {
        let bad = run(&job, 1);
        assert!(bad.is_empty(), "{bad:?}");
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn two_processes_agree_bitwise() {
    let job = format!("phalanx-test-shmproc-{}", std::process::id());
    // `child_rank` as libtest names it: this file is a module of the crate's test binary
    // (phalanx-testing's `test_path`, which this crate's tests cannot depend on: it depends on
    // this crate).
    let (_crate, module) = module_path!().split_once("::").unwrap_or(("", ""));
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &format!("{module}::child_rank"),
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &job)
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let bad = run(&job, 0);
    assert!(bad.is_empty(), "{bad:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "rank 1 did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "rank 1 failed: {status}");
}
