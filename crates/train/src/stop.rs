//! Stopping a run at a step boundary with a checkpoint: what Slurm's warning before a time
//! limit (`--signal=B:USR1@120`), a preemption or a requeue asks of a training job.
//!
//! Whoever catches the signal (the `phalanx train` binary installs the handler) calls
//! [`request`], which only stores the signal number, so it is async-signal-safe. The trainer
//! of an [`armed`] run reads [`requested`] at agreed step boundaries and agrees with the other
//! ranks whether to stop (Note [Stop agreement]).
//!
//! Note [Stop agreement]: the signal reaches the ranks at different moments (Slurm signals
//! every task, the launcher forwards it worker by worker), so one rank may see it a step
//! before another. The ranks therefore agree through a collective: at agreed step boundaries
//! each contributes its flag (the signal number, 0 for none) to one MAX allreduce of two
//! `i64`, and all of them stop after the same step. That step's checkpoint is committed (rank 0 writes it
//! under DDP, every rank its shard under a sharded mode), every rank waits for the commit, and
//! the run ends with [`Error::Stopped`](crate::Error::Stopped). Only armed runs (a checkpoint
//! directory and the handler installed) pay for it. At an epoch's last step the epoch finishes
//! first (evaluation and the epoch's own checkpoint), and the ranks agree after it.
//!
//! How often: the allreduce costs about 50 µs on one host (measured, docs/clusters.md), 5% of
//! a 1 ms step of a small model and nothing next to a large one's. So the same allreduce also
//! carries each rank's proposal of the interval to the next check (`StopCheck`): as many steps
//! as keep the check under 1% of the training time, at most as many as fit in 250 ms (the
//! longest a stop waits for its check), at least 1. The smallest proposal wins (the rank that
//! arrived last measured the collective, the others also their wait for it), so every rank
//! checks at the same steps: after a resume or a regroup the checks restart at the first step
//! on every rank alike.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use phalanx_core::ReduceOp;
use phalanx_pg::ProcessGroup;

use crate::Result;

/// The signal received and not yet acted on; 0 when none.
static REQUESTED: AtomicI32 = AtomicI32::new(0);
/// Whether the trainer checks for a stop at step boundaries.
static ARMED: AtomicBool = AtomicBool::new(false);

/// Asks the run to stop at the next step boundary because of `signal`. Only an atomic store:
/// callable from a signal handler.
pub fn request(signal: i32) {
    REQUESTED.store(signal, Ordering::SeqCst);
}

/// Makes the trainer check for a stop request at agreed step boundaries (one small allreduce
/// every few steps: Note [Stop agreement]).
pub fn arm() {
    ARMED.store(true, Ordering::SeqCst);
}

/// Whether the trainer checks for a stop request.
pub fn armed() -> bool {
    ARMED.load(Ordering::SeqCst)
}

/// The signal that asked this rank to stop, if any.
pub fn requested() -> Option<i32> {
    match REQUESTED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The check's share of the training time it aims to stay under.
const CHECK_SHARE: f64 = 0.01;
/// The longest a requested stop waits for the next check.
const CHECK_LATENCY: Duration = Duration::from_millis(250);

/// When the ranks next agree on whether to stop (Note [Stop agreement]); one per run of epochs,
/// the same on every rank.
pub(crate) struct StopCheck {
    /// The global step after which the next check happens.
    next: u64,
    /// When the last check ended, and the global step it was at.
    last: Option<(Instant, u64)>,
    /// What the last check took.
    cost: Duration,
}

impl StopCheck {
    /// Checks from the first step on.
    pub(crate) fn new() -> StopCheck {
        StopCheck {
            next: 0,
            last: None,
            cost: Duration::ZERO,
        }
    }

    /// Whether the ranks agree after `global_step` (completed).
    pub(crate) fn due(&self, global_step: u64) -> bool {
        armed() && global_step >= self.next
    }

    /// The ranks' agreement after `global_step`: the largest signal number any rank received,
    /// `None` when none did. A collective: every rank of `pg` calls it at the same step (the
    /// steps [`due`](Self::due) names).
    pub(crate) fn agree(&mut self, pg: &ProcessGroup, global_step: u64) -> Result<Option<i32>> {
        let began = Instant::now();
        // The second element is minus this rank's proposed interval, so that MAX takes the
        // smallest proposal: a rank that reached the check early measured its wait for the
        // others as part of the check's cost; the last to arrive measured the collective.
        let mut v = [i64::from(requested().unwrap_or(0)), -1];
        // The steps since the last check took `began - last`; the check itself, what the
        // last one measured: propose the interval that keeps the check under its share.
        if let Some((at, step)) = self.last {
            let steps = global_step.saturating_sub(step).max(1) as f64;
            let per_step = began.saturating_duration_since(at).as_secs_f64() / steps;
            v[1] = -(interval(self.cost, per_step) as i64);
        }
        pg.allreduce(&mut v, ReduceOp::Max)?;
        let now = Instant::now();
        self.cost = now - began;
        self.last = Some((now, global_step));
        self.next = global_step + v[1].unsigned_abs().max(1);
        tracing::debug!(
            step = global_step,
            took_us = self.cost.as_micros() as u64,
            next = self.next,
            "stop check"
        );
        Ok((v[0] != 0).then_some(v[0] as i32))
    }
}

/// Steps between checks for a check costing `cost` and steps of `per_step` seconds.
fn interval(cost: Duration, per_step: f64) -> u64 {
    if per_step <= 0.0 {
        return 1;
    }
    let cheap = (cost.as_secs_f64() / (CHECK_SHARE * per_step)).ceil();
    let prompt = (CHECK_LATENCY.as_secs_f64() / per_step).floor();
    cheap.min(prompt).max(1.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_keeps_the_check_cheap_and_the_stop_prompt() {
        let us = Duration::from_micros;
        // A 50 µs check after 1 ms steps: every 5 steps (1%).
        assert_eq!(interval(us(50), 0.001), 5);
        // After 100 ms steps: every step.
        assert_eq!(interval(us(50), 0.1), 1);
        // A slow check after very short steps: no more than 250 ms between checks.
        assert_eq!(interval(us(50_000), 0.001), 250);
        // Steps longer than the latency bound, or not measured: every step.
        assert_eq!(interval(us(50), 1.0), 1);
        assert_eq!(interval(us(50), 0.0), 1);
    }
}
