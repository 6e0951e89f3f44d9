//! Stopping a run at a step boundary with a checkpoint: what Slurm's warning before a time
//! limit (`--signal=B:USR1@120`), a preemption or a requeue asks of a training job.
//!
//! Whoever catches the signal (the `phalanx train` binary installs the handler) calls
//! [`request`], which only stores the signal number, so it is async-signal-safe. The trainer
//! checks [`requested`] at each step boundary of an [`armed`] run and agrees with the other
//! ranks whether to stop (Note [Stop agreement]).
//!
//! Note [Stop agreement]: the signal reaches the ranks at different moments (Slurm signals
//! every task, the launcher forwards it worker by worker), so one rank may see it a step
//! before another. Each rank therefore contributes its flag (the signal number, 0 for none) to
//! one 8-byte MAX allreduce after every step, and all of them stop after the same step: the
//! one at which the first rank to see the signal had finished. That step's checkpoint is
//! committed (rank 0 writes it under DDP, every rank its shard under a sharded mode), every
//! rank waits for the commit, and the run ends with [`Error::Stopped`](crate::Error::Stopped).
//! The allreduce is paid only by armed runs (a checkpoint directory and the handler
//! installed); docs/clusters.md gives its measured cost. At an epoch's last step the epoch
//! finishes first (evaluation and the epoch's own checkpoint), and the ranks agree after it.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

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

/// Makes the trainer check for a stop request at every step boundary (one 8-byte allreduce
/// per step: Note [Stop agreement]).
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

/// The ranks' agreement (Note [Stop agreement]): the largest signal number any rank received,
/// `None` when none did. A collective: every rank of `pg` calls it at the same step.
pub(crate) fn agree(pg: &ProcessGroup) -> Result<Option<i32>> {
    let mut flag = [i64::from(requested().unwrap_or(0))];
    pg.allreduce(&mut flag, ReduceOp::Max)?;
    Ok((flag[0] != 0).then_some(flag[0] as i32))
}
