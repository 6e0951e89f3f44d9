//! The end-of-epoch agreement: every rank stops after the same epoch.
//!
//! Note [Epoch agreement]: early stopping reads the validation metrics, which only rank 0 has
//! (Note [Validation on rank 0]); an interruption (Burn's `Interrupter`, the dashboard's quit
//! key on rank 0) or an error (a batch the dataset could not load) happens on one rank. Each
//! would otherwise leave the other ranks waiting in the next epoch's first collective. After
//! every epoch each rank contributes three numbers to one allreduce (MAX): rank 0's early-stop
//! decision, whether this rank was stopped, and 1 + this rank if it failed. Every rank gets the
//! same answer and leaves the loop after the same epoch; a rank stopped by another is told who.
//! A rank stopped mid-epoch leaves its loop early and `join`s, so the others finish the epoch
//! and reach the agreement. (A panic does not come here: `abort_on_panic` ends the job.)

use burn_train::Interrupter;
use phalanx_core::ReduceOp;
use phalanx_pg::ProcessGroup;

use crate::error::{Error, Result};

/// What every rank does after an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Train the next epoch.
    Continue,
    /// Rank 0's early stopping strategy ended the training.
    EarlyStop,
    /// Some rank was interrupted.
    Interrupted,
    /// Some rank failed; the highest such rank.
    Failed {
        /// The rank that failed.
        rank: usize,
    },
}

/// The three numbers as the allreduce sees them, and back.
fn encode(early_stop: bool, stopped: bool, failed: Option<usize>) -> [i64; 3] {
    [
        i64::from(early_stop),
        i64::from(stopped),
        failed.map_or(0, |r| r as i64 + 1),
    ]
}

fn decode(reduced: [i64; 3]) -> Verdict {
    match reduced {
        [_, _, f] if f > 0 => Verdict::Failed {
            rank: (f - 1) as usize,
        },
        [_, s, _] if s > 0 => Verdict::Interrupted,
        [e, _, _] if e > 0 => Verdict::EarlyStop,
        _ => Verdict::Continue,
    }
}

/// One allreduce: what every rank does next (Note [Epoch agreement]).
pub(crate) fn agree(
    pg: &ProcessGroup,
    early_stop: bool,
    interrupter: &Interrupter,
) -> Result<Verdict> {
    let failed = interrupter.error().map(|_| pg.rank());
    let mut numbers = encode(early_stop, interrupter.should_stop(), failed);
    pg.allreduce(&mut numbers, ReduceOp::Max)
        .map_err(|source| Error::Collective {
            rank: pg.rank(),
            operation: "the end-of-epoch agreement",
            source,
        })?;
    Ok(decode(numbers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_beats_interruption_beats_early_stop() {
        assert_eq!(decode(encode(false, false, None)), Verdict::Continue);
        assert_eq!(decode(encode(true, false, None)), Verdict::EarlyStop);
        assert_eq!(decode(encode(true, true, None)), Verdict::Interrupted);
        assert_eq!(
            decode(encode(true, true, Some(0))),
            Verdict::Failed { rank: 0 }
        );
        assert_eq!(
            decode(encode(false, true, Some(3))),
            Verdict::Failed { rank: 3 }
        );
    }

    #[test]
    fn the_maximum_over_ranks_names_a_failed_rank() {
        let ranks = [encode(false, false, None), encode(false, true, Some(2))];
        let mut max = [0i64; 3];
        for r in ranks {
            for (m, v) in max.iter_mut().zip(r) {
                *m = (*m).max(v);
            }
        }
        assert_eq!(decode(max), Verdict::Failed { rank: 2 });
    }
}
