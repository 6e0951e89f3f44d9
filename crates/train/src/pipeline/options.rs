//! [`PipelineOptions`]: what `--pp` and its flags ask for.

use super::schedule::{PipelineSchedule, Schedule};
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
            // Interleaved sends the microbatches round in groups of the pipeline's ranks.
            PipelineSchedule::Interleaved if microbatches >= self.stages => {
                microbatches - microbatches % self.stages
            }
            _ => microbatches,
        };
        Schedule::new(self.schedule, self.stages, self.virtual_stages, m).map_err(Error::Config)
    }
}
