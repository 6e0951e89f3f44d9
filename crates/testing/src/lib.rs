//! Test harnesses: N ranks as threads, each with a real [`ProcessGroup`] connected over
//! loopback TCP through one in-memory store (gloo's `base_test.h`, in Rust).
//!
//! ```
//! use phalanx_core::ReduceOp;
//! let sums = phalanx_testing::spawn_ranks(3, |pg| {
//!     let mut v = vec![pg.rank() as f32];
//!     pg.allreduce(&mut v, ReduceOp::Sum).unwrap();
//!     v[0]
//! });
//! assert_eq!(sums, vec![3.0; 3]);
//! ```
#![warn(missing_docs, unreachable_pub)]

pub mod etcd;
pub mod fuzz;
pub mod process;

use std::{sync::Arc, time::Duration};

use phalanx_pg::{CollectiveOptions, Placement, ProcessGroup};
use phalanx_store::{Auth, HashStore, Store};

/// Deadline of every collective in these harnesses: a broken algorithm fails the test
/// instead of hanging it.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `f` on another thread and panics if it has not finished within `deadline`: a test
/// that would hang fails instead (the stuck thread is left behind; the test process ends).
pub fn with_deadline<R: Send + 'static>(
    deadline: Duration,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(deadline).unwrap_or_else(|e| match e {
        std::sync::mpsc::RecvTimeoutError::Timeout => {
            panic!("not finished within the deadline of {deadline:?}")
        }
        std::sync::mpsc::RecvTimeoutError::Disconnected => panic!("it panicked (above)"),
    })
}

/// Runs `f` on `world` ranks (threads) and returns their results in rank order.
pub fn spawn_ranks<R: Send>(world: usize, f: impl Fn(ProcessGroup) -> R + Sync) -> Vec<R> {
    spawn_ranks_with(world, CollectiveOptions::default(), TEST_TIMEOUT, f)
}

/// [`spawn_ranks`] with every collective over loopback TCP (no shared memory), to test the
/// network path on one host.
pub fn spawn_ranks_tcp<R: Send>(world: usize, f: impl Fn(ProcessGroup) -> R + Sync) -> Vec<R> {
    let opts = CollectiveOptions {
        shared_memory: false,
        ..CollectiveOptions::default()
    };
    spawn_ranks_with(world, opts, TEST_TIMEOUT, f)
}

/// [`spawn_ranks`] with explicit algorithm options and timeout.
pub fn spawn_ranks_with<R: Send>(
    world: usize,
    opts: CollectiveOptions,
    timeout: Duration,
    f: impl Fn(ProcessGroup) -> R + Sync,
) -> Vec<R> {
    let store: Arc<dyn Store> = Arc::new(HashStore::with_timeout(timeout));
    let auth = Auth::new("test", b"test-token".to_vec());
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let (store, auth, opts, f) = (store.clone(), auth.clone(), opts.clone(), &f);
                s.spawn(move || {
                    let placement = Placement {
                        rank,
                        world_size: world,
                        local_rank: rank,
                        local_world_size: world,
                        node_rank: 0,
                    };
                    let pg = phalanx_pg::connect(
                        placement,
                        store,
                        None,
                        &auth,
                        timeout,
                        [127, 0, 0, 1].into(),
                        opts,
                    )
                    .expect("connecting the test mesh");
                    f(pg)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}
