//! Waiting for a peer's step: spin briefly, then sleep on the peer's futex word, while
//! watching for aborts, a dead peer and the progress timeout.
//!
//! Note [Spin then sleep]: a peer that runs on its own core publishes within microseconds,
//! and a spin round trip costs ~0.15 µs where waking a sleeping process costs ~40-50 µs, so a
//! wait first spins. It spins for a bounded, adaptive time only: when the peer is not
//! running (ranks outnumber cores, another process holds the peer's core, or the peer is
//! still computing) spinning burns a core the peer may need, and sleeping lets the kernel
//! move the peer onto the freed core. So after the spin budget the waiter registers in the
//! peer's `waiters` word and sleeps on its futex; `publish` wakes sleepers only when that
//! word is non-zero, so the fast path makes no system call.
//!
//! The budget adapts per group between [`MIN_SPIN`] and the configured maximum: a wait that
//! slept but ended within one wake-up latency of giving up means the budget was too short
//! (double it); a wait that slept long means the peer was not running (halve it). Measured
//! on 2 cores with a competing busy process, a fixed 200 µs budget ran 64 MiB allreduces at
//! 0.56 GB/s and a 5 µs one at 3.0 GB/s (docs/shm.md).

use std::{
    hint,
    sync::atomic::Ordering,
    thread,
    time::{Duration, Instant},
};

use super::{layout::Control, segment::ShmSegment, sys};
use crate::{Error, Fingerprint, Result};

/// Longest single futex sleep: bounds how late an abort of a rank we are not waiting on,
/// or a dead peer, is noticed.
const POLL: Duration = Duration::from_millis(20);
/// How often a slow wait checks that the awaited peer's process still exists: a syscall and a
/// small `/proc` read, nothing next to a wait this long, and what a dead peer costs the others
/// (under fault tolerance, the time until they train on without it).
const LIVENESS_EVERY: Duration = Duration::from_millis(20);

/// Smallest adaptive spin budget: covers the lockstep skew of two running ranks.
pub(crate) const MIN_SPIN: Duration = Duration::from_micros(4);
/// A sleep that ends within this long after the spin gave up was a near miss.
const WAKE_LATENCY: Duration = Duration::from_micros(100);

/// The default maximum spin budget for `world` ranks on this host, and whether to yield
/// while spinning.
pub(crate) fn default_spin(world: usize) -> (Duration, bool) {
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    if world <= cores {
        (Duration::from_micros(100), false)
    } else {
        // Oversubscribed: the rank we wait for probably needs our core; yield while spinning.
        (Duration::from_micros(20), true)
    }
}

/// Wait policy and what a slow wait checks.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) timeout: Duration,
    /// Largest spin budget.
    pub(crate) max_spin: Duration,
    /// Current adaptive spin budget (≤ `max_spin`).
    spin: Duration,
    yield_in_spin: bool,
    pids: Vec<u32>,
    check_pids: bool,
}

impl Waiter {
    pub(crate) fn new(world: usize, timeout: Duration, pids: Vec<u32>, check_pids: bool) -> Self {
        let (max_spin, yield_in_spin) = default_spin(world);
        Waiter {
            timeout,
            max_spin,
            spin: max_spin,
            yield_in_spin,
            pids,
            check_pids,
        }
    }

    /// Sets the largest spin budget (zero: always sleep).
    pub(crate) fn set_max_spin(&mut self, max: Duration) {
        self.max_spin = max;
        self.spin = max;
    }

    /// Adapts the spin budget after a wait that slept: see Note [Spin then sleep].
    fn adapt(&mut self, waited: Duration) {
        if waited <= self.spin + WAKE_LATENCY {
            self.spin = (self.spin * 2).clamp(MIN_SPIN, self.max_spin.max(MIN_SPIN));
        } else {
            self.spin = (self.spin / 2).max(MIN_SPIN);
        }
        self.spin = self.spin.min(self.max_spin);
    }

    /// Returns once `segs[peer]`'s step reaches `target` (its buffers written before that
    /// step are then visible: Acquire pairs with the publisher's SeqCst store).
    pub(crate) fn wait(
        &mut self,
        segs: &[ShmSegment],
        me: usize,
        peer: usize,
        target: u64,
        fp: &Fingerprint,
    ) -> Result<()> {
        let c = Control::of(&segs[peer]);
        let ready = || c.step().load(Ordering::Acquire) >= target;
        if ready() {
            return Ok(());
        }
        let start = Instant::now();
        loop {
            for _ in 0..64 {
                hint::spin_loop();
                if ready() {
                    return Ok(());
                }
            }
            if self.yield_in_spin {
                thread::yield_now();
            }
            if start.elapsed() >= self.spin {
                break;
            }
        }
        let r = self.sleep(segs, me, peer, target, fp, start);
        self.adapt(start.elapsed());
        r
    }

    /// The slow path: futex sleeps in bounded slices, checking for failures in between.
    fn sleep(
        &self,
        segs: &[ShmSegment],
        me: usize,
        peer: usize,
        target: u64,
        fp: &Fingerprint,
        start: Instant,
    ) -> Result<()> {
        let c = Control::of(&segs[peer]);
        let ready = || c.step().load(Ordering::Acquire) >= target;
        let mut next_liveness = start + LIVENESS_EVERY;
        loop {
            check_aborts(segs, me, target)?;
            let now = Instant::now();
            if now >= start + self.timeout {
                return Err(Error::Timeout {
                    during: fp.to_string(),
                    waiting_for: (0..segs.len())
                        .filter(|&p| {
                            p != me && Control::of(&segs[p]).step().load(Ordering::Acquire) < target
                        })
                        .collect(),
                    after: self.timeout,
                });
            }
            if self.check_pids && now >= next_liveness {
                next_liveness = now + LIVENESS_EVERY;
                // Re-check the step after seeing the exit: a peer may publish its last step
                // and exit normally.
                if sys::process_exited(self.pids[peer]) && !ready() {
                    return Err(Error::PeerExited {
                        peer,
                        pid: self.pids[peer],
                        during: fp.to_string(),
                    });
                }
            }
            c.waiters().fetch_add(1, Ordering::SeqCst);
            let seen = c.futex().load(Ordering::SeqCst);
            if c.step().load(Ordering::SeqCst) < target {
                let left = (start + self.timeout).saturating_duration_since(now);
                sys::futex_wait(c.futex(), seen, left.min(POLL));
            }
            c.waiters().fetch_sub(1, Ordering::SeqCst);
            if ready() {
                return Ok(());
            }
        }
    }
}

/// Fails when this rank (from another thread) has aborted, or a peer that has not yet
/// reached step `target` has: a peer that left after publishing the step (its group was
/// dropped at the end of the job) holds nobody up.
fn check_aborts(segs: &[ShmSegment], me: usize, target: u64) -> Result<()> {
    for (p, seg) in segs.iter().enumerate() {
        let c = Control::of(seg);
        if p != me && c.step().load(Ordering::Acquire) >= target {
            continue;
        }
        let Some(reason) = c.read_abort() else {
            continue;
        };
        return Err(if p == me {
            Error::Aborted { reason }
        } else {
            Error::PeerAborted { peer: p, reason }
        });
    }
    Ok(())
}
