//! [`Bubble`]: what a pipeline's stages computed and waited, against the schedule's theory,
//! and [`Busy`], the per-step record each stage keeps of it.
//!
//! Note [The measured bubble]
//! The schedule's theory, `(p − 1)/(v·m + p − 1)`, is the share of a step a stage waits when
//! every stage computes the same. Real stages differ (the last computes the head and the
//! loss): a lighter stage also waits for the heavier, every microbatch, which is imbalance
//! and not the schedule's. So the bubble reported is the busiest stage's (the one that
//! computed most over the run) idle share in its median step: the time the step loses to the
//! fill and the drain. The median, of the last 1,024 steps, so that the first step's warm-up
//! and a neighbour's burst on a shared machine do not count as the schedule's; each rank's
//! own idle share over the whole run, every step counted, and the imbalance (how much less
//! the lightest stage computed than the busiest) are reported beside it.

use phalanx_pg::ProcessGroup;

use crate::Result;

/// A pipeline's bubble over a run (Note [The measured bubble]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bubble {
    /// The share of its steps the busiest stage did not compute.
    pub measured: f64,
    /// The schedule's in theory: `(p − 1)/(v·m + p − 1)` ([`Schedule::bubble`](super::Schedule::bubble)).
    pub theory: f64,
    /// How much less the lightest stage computed than the busiest: `1 − lightest/busiest`.
    pub imbalance: f64,
    /// The share of its steps this rank did not compute.
    pub idle: f64,
}

/// The steps this rank's last [`BUSY_STEPS`] idle shares are kept of.
const BUSY_STEPS: usize = 1024;

/// What a rank computed and waited in its steps (Note [The measured bubble]).
#[derive(Debug, Default)]
pub(super) struct Busy {
    /// Seconds computing, summed over the run.
    computing: f64,
    /// Seconds in the steps, summed over the run.
    wall: f64,
    /// The idle share of each of the last [`BUSY_STEPS`] steps, the oldest overwritten.
    idle: Vec<f64>,
    /// Steps so far.
    steps: usize,
}

impl Busy {
    /// One step: `computing` of its `wall` seconds.
    pub(super) fn add(&mut self, computing: f64, wall: f64) {
        self.computing += computing;
        self.wall += wall;
        let idle = 1.0 - computing / wall.max(1e-12);
        match self.idle.len() < BUSY_STEPS {
            true => self.idle.push(idle),
            false => self.idle[self.steps % BUSY_STEPS] = idle,
        }
        self.steps += 1;
    }

    /// The idle share of the median step of the last [`BUSY_STEPS`] (the lower of the middle
    /// two, so that of two steps the warm-up is not the one taken; 0 before a step ran).
    fn median_idle(&self) -> f64 {
        let mut idle = self.idle.clone();
        idle.sort_by(f64::total_cmp);
        idle.get(idle.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(0.0)
    }

    /// The pipeline's bubble from every stage's record, next to the schedule's `theory`;
    /// `None` before a step ran. A collective of `pp`, the pipeline's group.
    pub(super) fn bubble(&self, pp: &ProcessGroup, theory: f64) -> Result<Option<Bubble>> {
        let mine = [self.computing, self.wall, self.median_idle()];
        let mut all = vec![0f64; 3 * pp.world_size()];
        pp.allgather(&mine, &mut all)?;
        let busiest = all
            .chunks(3)
            .max_by(|a, b| a[0].total_cmp(&b[0]))
            .unwrap_or(&mine);
        let lightest = all.chunks(3).map(|s| s[0]).fold(f64::INFINITY, f64::min);
        // Every stage of a pipeline runs the same steps.
        if self.steps == 0 {
            return Ok(None);
        }
        Ok(Some(Bubble {
            measured: busiest[2],
            theory,
            imbalance: 1.0 - lightest / busiest[0].max(1e-12),
            idle: 1.0 - self.computing / self.wall.max(1e-12),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The median step's idle share, of the last `BUSY_STEPS` only; the sums over all.
    #[test]
    fn the_bubble_is_the_median_steps_and_the_idle_share_every_steps() {
        let mut busy = Busy::default();
        assert_eq!(busy.median_idle(), 0.0);
        // Of two steps, the lower: the warm-up is not taken.
        busy.add(0.1, 1.0);
        busy.add(0.9, 1.0);
        assert!((busy.median_idle() - 0.1).abs() < 1e-12);
        let mut busy = Busy::default();
        // A warm-up step idle 90%, then steps idle 10%, 20%, 10%, 10%.
        for (computing, wall) in [(0.1, 1.0), (0.9, 1.0), (0.8, 1.0), (0.9, 1.0), (1.8, 2.0)] {
            busy.add(computing, wall);
        }
        assert!((busy.median_idle() - 0.1).abs() < 1e-12);
        assert!((1.0 - busy.computing / busy.wall - 0.25).abs() < 1e-12);
        // The oldest are overwritten: after BUSY_STEPS steps idle 50%, no other is left.
        for _ in 0..BUSY_STEPS {
            busy.add(0.5, 1.0);
        }
        assert_eq!(busy.idle.len(), BUSY_STEPS);
        assert!(busy.idle.iter().all(|&i| (i - 0.5).abs() < 1e-12));
        assert_eq!(busy.steps, BUSY_STEPS + 5);
    }
}
