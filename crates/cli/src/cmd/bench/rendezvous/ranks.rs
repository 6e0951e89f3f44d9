//! [`Ranks`]: one repetition's rank threads, from their start line to their exit.
//!
//! Note [Ranks leave after the clock stops]
//! A rank thread notes when it had its answer, then waits at a second gate, and the threads
//! exit only once every rank (in every process) had its answer. Exiting as soon as it was
//! answered, each thread unmapped its stack while the others were still being served, a TLB
//! shootdown of the other core each: 9% of the CPU time inside the measured window at 16,384
//! ranks, a cost of simulating ranks as threads of one process that a job's ranks, processes
//! on their own machines, never put on the store's.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::Context;
use phalanx_pg::bootstrap::{exchange, vote, Peer};
use phalanx_store::{PrefixStore, Store};

use super::timing::{monotonic_ns, Gate};

/// One repetition's rank threads, each with its own store connection.
pub(super) struct Ranks {
    start: Arc<Gate>,
    leave: Arc<Gate>,
    /// When the last rank so far had its answer ([`monotonic_ns`]).
    latest: Arc<AtomicU64>,
    threads: Vec<JoinHandle<anyhow::Result<()>>>,
}

/// Brings its rank thread to the `leave` gate however the rank's work ended, so that
/// [`Ranks::answered`] cannot wait for a rank that failed.
struct Arrive(Arc<Gate>);

impl Drop for Arrive {
    fn drop(&mut self) {
        self.0.wait();
    }
}

impl Ranks {
    /// Spawns the threads of ranks `first..first + clients.len()` of `world` for repetition
    /// `it` (fresh keys under `iter<it>`), and returns once all wait at the start line.
    pub(super) fn spawn(
        clients: &[Arc<dyn Store>],
        first: usize,
        world: usize,
        it: usize,
        timeout: Duration,
    ) -> anyhow::Result<Ranks> {
        let start = Arc::new(Gate::default());
        let leave = Arc::new(Gate::default());
        let latest = Arc::new(AtomicU64::new(0));
        let threads = clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let r = first + i;
                let store = PrefixStore::new(format!("iter{it}"), c.clone());
                let (start, leave, latest) = (start.clone(), leave.clone(), latest.clone());
                std::thread::Builder::new()
                    .stack_size(256 * 1024)
                    .spawn(move || -> anyhow::Result<()> {
                        let _arrive = Arrive(leave);
                        let me = Peer {
                            addr: format!("127.0.0.1:{}", 1024 + r % 60_000).parse()?,
                            host: format!("bench/host-{}/0", r / 8),
                        };
                        start.wait();
                        let peers = exchange(&store, r, world, &me, timeout)?;
                        anyhow::ensure!(peers.len() == world, "rank {r}: short peer table");
                        // A process holds one table; N threads holding theirs through the
                        // vote held N tables at once.
                        drop(peers);
                        vote(&store, "vote", r, world, true, timeout)?;
                        latest.fetch_max(monotonic_ns(), Ordering::SeqCst);
                        Ok(())
                    })
                    .with_context(|| {
                        format!("spawning rank {r}'s thread (threads are limited by kernel.pid_max and kernel.threads-max)")
                    })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        start.all_there(threads.len());
        Ok(Ranks {
            start,
            leave,
            latest,
            threads,
        })
    }

    /// Starts every rank, and returns when the last one had its answer ([`monotonic_ns`]);
    /// the threads stay until [`Ranks::leave`] (Note [Ranks leave after the clock stops]).
    pub(super) fn answered(&self) -> u64 {
        self.start.open();
        self.leave.all_there(self.threads.len());
        self.latest.load(Ordering::SeqCst)
    }

    /// Lets the threads exit and joins them; the first rank's error, if any.
    pub(super) fn leave(self) -> anyhow::Result<()> {
        self.leave.open();
        let mut first_error = Ok(());
        for t in self.threads {
            let r = t.join().expect("a rank thread panicked");
            if first_error.is_ok() {
                first_error = r;
            }
        }
        first_error
    }
}
