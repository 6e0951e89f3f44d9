//! [`PipelineOptions`]: what `--pp` and its flags ask for.

use super::schedule::{interleaved_fits, PipelineSchedule, Schedule};
use crate::{Error, Result};

/// `--pp`'s options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineOptions {
    /// Ranks of each pipeline (`--pp`; 1: none).
    pub stages: usize,
    /// Microbatches per step (`--microbatches`).
    pub microbatches: usize,
    /// The schedule (`--pp-schedule`).
    pub schedule: PipelineSchedule,
    /// Chunks per rank (`--virtual-stages`; the interleaved schedule's).
    pub virtual_stages: usize,
    /// The first block of each stage after the first (`--pp-split`); `None`: balanced.
    pub split: Option<Vec<usize>>,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            stages: 1,
            microbatches: 1,
            schedule: PipelineSchedule::OneFOneB,
            virtual_stages: 1,
            split: None,
        }
    }
}

impl PipelineOptions {
    /// The schedule with `microbatches` (the step's: a short last batch may take fewer).
    pub(crate) fn schedule_for(&self, microbatches: usize) -> Result<Schedule> {
        let m = match self.schedule {
            // Interleaved sends the microbatches round in rounds of equal size: the most that
            // split so (Note [Rounds of microbatches]); one microbatch always does.
            PipelineSchedule::Interleaved => (1..=microbatches)
                .rev()
                .find(|&m| interleaved_fits(self.stages, m))
                .unwrap_or(1),
            _ => microbatches,
        };
        Schedule::new(self.schedule, self.stages, self.virtual_stages, m).map_err(Error::Config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A short last batch takes the most microbatches its rows allow, down to a round of
    /// one row each under interleaved 1F1B (Note [Rounds of microbatches]).
    #[test]
    fn a_short_batch_takes_the_most_microbatches_that_fit() {
        let options = |stages, schedule| PipelineOptions {
            stages,
            microbatches: 12,
            schedule,
            virtual_stages: 2,
            split: None,
        };
        let taken = |o: &PipelineOptions, rows| o.schedule_for(rows).unwrap().microbatches();
        let interleaved = options(4, PipelineSchedule::Interleaved);
        assert_eq!(
            [11, 9, 7, 3, 1].map(|r| taken(&interleaved, r)),
            [10, 8, 7, 3, 1]
        );
        let one_f_one_b = PipelineOptions {
            virtual_stages: 1,
            ..options(4, PipelineSchedule::OneFOneB)
        };
        assert_eq!([11, 1].map(|r| taken(&one_f_one_b, r)), [11, 1]);
    }
}
