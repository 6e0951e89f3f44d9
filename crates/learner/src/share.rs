//! Which batches of an epoch a rank trains on: a pure function, tested below.
//!
//! Note [Batch striding]: the strategy receives burn-train's data loader as
//! `Arc<dyn DataLoader>`, whose only ways in are a whole pass (`iter`, shuffled by the loader's
//! own seeded generator, which advances every epoch) and a fixed contiguous range (`slice`). A
//! fixed range per rank would show each rank the same fifth of the data every epoch, which is
//! not what PyTorch's `DistributedSampler` does. Instead every rank walks the same pass (the
//! same seed gives the same permutation on every rank, a new one every epoch) and keeps the
//! batches at positions `rank, rank + world, rank + 2 * world, …`: over all ranks every sample
//! is trained on exactly once per epoch, and the order changes every epoch, the same on every
//! rank: `DistributedSampler`'s semantics at the granularity of batches. The price: every rank
//! assembles the batches it skips (Burn builds a batch when its iterator reaches it). It needs
//! the pass in the same order on every rank: Burn's multi-worker loader (`num_workers > 1`)
//! yields batches as its threads finish them, so with it coverage is no longer exact.
//! `DistributedSampler` pads the ranks to equal lengths by repeating samples; here the ranks
//! left with one batch fewer join (`DistributedDataParallel::join`, PyTorch's `Join`) and average
//! over the ranks that still have data, so nothing is seen twice.

/// This rank's share of an epoch's batches (Note [Batch striding]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Share {
    rank: usize,
    world: usize,
}

impl Share {
    /// The share of `rank` in a group of `world` ranks (`rank < world`).
    pub(crate) fn new(rank: usize, world: usize) -> Share {
        debug_assert!(rank < world, "rank {rank} of {world}");
        Share { rank, world }
    }

    /// Whether the batch at `position` of the pass (0-based) is this rank's.
    pub(crate) fn owns(&self, position: usize) -> bool {
        position % self.world == self.rank
    }

    /// How many of `batches` batches this rank trains on.
    #[cfg(test)]
    pub(crate) fn steps(&self, batches: usize) -> usize {
        batches / self.world + usize::from(batches % self.world > self.rank)
    }
}

#[cfg(test)]
mod tests {
    use super::Share;

    #[test]
    fn every_batch_once_over_the_ranks() {
        for world in [1, 2, 3, 4, 5, 7, 8] {
            for batches in [0, 1, 2, 7, 8, 9, 64] {
                let mut owners = vec![0; batches];
                let mut total = 0;
                for rank in 0..world {
                    let share = Share::new(rank, world);
                    let mine: Vec<usize> = (0..batches).filter(|&p| share.owns(p)).collect();
                    assert_eq!(
                        mine.len(),
                        share.steps(batches),
                        "{rank}/{world} of {batches}"
                    );
                    mine.iter().for_each(|&p| owners[p] += 1);
                    total += share.steps(batches);
                }
                assert!(
                    owners.iter().all(|&n| n == 1),
                    "{world} ranks, {batches} batches"
                );
                assert_eq!(total, batches);
            }
        }
    }

    #[test]
    fn steps_differ_by_at_most_one() {
        for world in 1..9 {
            for batches in 0..40 {
                let steps: Vec<usize> = (0..world)
                    .map(|r| Share::new(r, world).steps(batches))
                    .collect();
                let (lo, hi) = (steps.iter().min().unwrap(), steps.iter().max().unwrap());
                assert!(hi - lo <= 1, "{steps:?}");
            }
        }
    }
}
