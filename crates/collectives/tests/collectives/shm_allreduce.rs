//! Shared-memory collectives, ranks as threads: every result bitwise equal to the TCP ring's
//! and to a sequential fold in the canonical order, for every world × count × op × dtype.

use crate::common;

use common::{expected, input};

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex,
    },
    time::Duration,
};

use half::{bf16, f16};
use phalanx_collectives::{
    allreduce, allreduce_shm_with, barrier_shm, broadcast_shm, Algorithm, Options, ShmOptions,
};
use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{
    shm::{ShmGroup, ShmSegment},
    Error,
};

const WORLDS: [usize; 6] = [1, 2, 3, 4, 5, 8];
/// 5000 elements exceed the 4 KiB test buffers for every dtype, so large buffers take
/// several chunks with uneven pieces.
const COUNTS: [usize; 6] = [0, 1, 7, 1000, 5000, 40_001];
const BUFFER_BYTES: usize = 4096;

/// One group's segments, created up front so that each rank's thread can open its peers'.
struct Segments {
    job: String,
    bytes: usize,
    own: Mutex<Vec<Option<ShmSegment>>>,
}

impl Segments {
    fn new(world: usize, buffer_bytes: usize) -> Segments {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let job = format!(
            "phalanx-test-shmar-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let bytes = ShmGroup::segment_bytes(buffer_bytes);
        let own = (0..world)
            .map(|r| Some(ShmSegment::create(&format!("{job}-{r}"), bytes).unwrap()))
            .collect();
        Segments {
            job,
            bytes,
            own: Mutex::new(own),
        }
    }

    fn join(&self, rank: usize, world: usize) -> ShmGroup {
        let own = self.own.lock().unwrap()[rank].take().unwrap();
        let peers = (0..world)
            .map(|p| {
                (p != rank)
                    .then(|| ShmSegment::open(&format!("{}-{p}", self.job), self.bytes).unwrap())
            })
            .collect();
        // Deadline for every wait: a broken algorithm fails, never hangs.
        ShmGroup::new(rank, world, own, peers, Duration::from_secs(20)).unwrap()
    }
}

/// Runs `f(rank, group)` on `world` threads over fresh segments.
fn with_shm<R: Send>(
    world: usize,
    buffer_bytes: usize,
    f: impl Fn(usize, &mut ShmGroup) -> R + Sync,
) -> Vec<R> {
    let segs = Segments::new(world, buffer_bytes);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|rank| {
                let (segs, f) = (&segs, &f);
                s.spawn(move || f(rank, &mut segs.join(rank, world)))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn bits<T: Element>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// Each rank runs the TCP ring and both shared-memory paths on the same inputs.
fn sweep<T: Element>() {
    let ring = Options {
        direct_max_bytes: 0,
        chunk_bytes: 1000,
        ..Options::default()
    };
    let small = ShmOptions {
        small_max_bytes: usize::MAX,
        ..ShmOptions::default()
    };
    let pieces = ShmOptions {
        small_max_bytes: 0,
        ..ShmOptions::default()
    };
    for world in WORLDS {
        let segs = Segments::new(world, BUFFER_BYTES);
        let failures = common::with_mesh(world, |rank, t| {
            let mut g = segs.join(rank, world);
            let mut bad = Vec::new();
            let mut seq = 0;
            for count in COUNTS {
                for op in ReduceOp::ALL {
                    let salt = seq;
                    let want = expected::<T>(world, count, op, salt);
                    let mut tcp = input::<T>(rank, count, salt);
                    allreduce(t, seq, &mut tcp, op, &ring).unwrap();
                    for (name, opts) in [("small", &small), ("pieces", &pieces)] {
                        let mut buf = input::<T>(rank, count, salt);
                        let algo = allreduce_shm_with(&mut g, seq, &mut buf, op, opts).unwrap();
                        let expect_algo = if world == 1 || count == 0 {
                            Algorithm::Local
                        } else {
                            Algorithm::Shm
                        };
                        assert_eq!(algo, expect_algo);
                        if bits(&buf) != bits(&tcp) || bits(&buf) != bits(&want) {
                            bad.push(format!(
                                "world {world} count {count} {op} {name} rank {rank}"
                            ));
                        }
                        seq += 1;
                    }
                }
            }
            bad
        });
        let failures: Vec<_> = failures.into_iter().flatten().collect();
        assert!(failures.is_empty(), "{} {failures:?}", T::DTYPE);
    }
}

#[test]
fn sweep_f32() {
    sweep::<f32>();
}
#[test]
fn sweep_f64() {
    sweep::<f64>();
}
#[test]
fn sweep_bf16() {
    sweep::<bf16>();
}
#[test]
fn sweep_f16() {
    sweep::<f16>();
}
#[test]
fn sweep_i32() {
    sweep::<i32>();
}
#[test]
fn sweep_i64() {
    sweep::<i64>();
}
#[test]
fn sweep_u8() {
    sweep::<u8>();
}

/// Default options and a bigger buffer: many chunks, both buffers, interleaved with
/// broadcasts and barriers (which take their own steps and buffer uses).
#[test]
fn mixed_collectives_keep_in_step() {
    for world in [2, 3, 4] {
        let bad = with_shm(world, 64 * 1024, |rank, g| {
            let mut bad = Vec::new();
            for (seq, count) in [100_003usize, 3, 4096, 20_000, 1, 70_000]
                .into_iter()
                .enumerate()
            {
                let seq = seq as u64 * 3;
                let mut buf = input::<f32>(rank, count, seq);
                allreduce_shm_with(g, seq, &mut buf, ReduceOp::Sum, &ShmOptions::default())
                    .unwrap();
                if bits(&buf) != bits(&expected::<f32>(world, count, ReduceOp::Sum, seq)) {
                    bad.push(format!("allreduce world {world} count {count}"));
                }
                let root = count % world;
                let mut b = input::<i64>(rank, count, seq);
                broadcast_shm(g, seq + 1, &mut b, root).unwrap();
                if b != input::<i64>(root, count, seq) {
                    bad.push(format!("broadcast world {world} count {count} root {root}"));
                }
                barrier_shm(g, seq + 2).unwrap();
            }
            bad
        });
        let bad: Vec<_> = bad.into_iter().flatten().collect();
        assert!(bad.is_empty(), "{bad:?}");
    }
}

#[test]
fn mismatched_counts_fail_on_both_sides_naming_each_other() {
    let errs = with_shm(2, BUFFER_BYTES, |rank, g| {
        let mut buf = vec![1.0f32; 10 + rank];
        let e =
            allreduce_shm_with(g, 0, &mut buf, ReduceOp::Sum, &ShmOptions::default()).unwrap_err();
        // The group is failed from now on.
        let again = barrier_shm(g, 1).unwrap_err();
        (e, again)
    });
    for (rank, (e, again)) in errs.into_iter().enumerate() {
        match e {
            Error::Mismatch {
                me,
                peer,
                ours,
                theirs,
            } => {
                assert_eq!((me, peer), (rank, 1 - rank));
                assert_eq!(ours.count, 10 + rank as u64);
                assert_eq!(theirs.count, 11 - rank as u64);
            }
            other => panic!("rank {rank}: expected a mismatch, got {other}"),
        }
        assert!(matches!(again, Error::Aborted { .. }), "{again}");
    }
}

#[test]
fn mismatched_dtype_and_op_are_named() {
    let errs = with_shm(3, BUFFER_BYTES, |rank, g| {
        if rank == 2 {
            let mut buf = vec![1i32; 8];
            allreduce_shm_with(g, 0, &mut buf, ReduceOp::Max, &ShmOptions::default()).unwrap_err()
        } else {
            let mut buf = vec![1.0f32; 8];
            allreduce_shm_with(g, 0, &mut buf, ReduceOp::Sum, &ShmOptions::default()).unwrap_err()
        }
    });
    for (rank, e) in errs.iter().enumerate() {
        let text = e.to_string();
        assert!(text.contains("collective mismatch"), "rank {rank}: {text}");
        assert!(
            text.contains("i32") && text.contains("f32"),
            "rank {rank}: {text}"
        );
    }
}
