//! Where an epoch resumes: which sample indices a rank still has to see.
//!
//! Note [Sampler position]: a DistributedSampler gives rank `r` the padded permutation's
//! positions `r, r+W, r+2W, …`, so after `s` steps of `b` samples on `W` ranks the job has
//! consumed exactly the first `s·b·W` positions of the global order — a prefix. Resuming with
//! the same world size skips `s·b` of the rank's own indices (bitwise the same data order as
//! an uninterrupted run); with another world size, the rest of the epoch's permutation is
//! re-sharded by striding, padded like the sampler so every rank takes as many steps.

use phalanx_data::DistributedSampler;
use phalanx_pg::ProcessGroup;

use crate::Result;

/// Where the run stands between two steps: what a checkpoint records and what a rank that
/// joins a running job (Note [A regroup] in `trainer/regroup/replicas.rs`) takes from a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    /// The epoch in progress (0-based).
    pub epoch: u64,
    /// Steps of it already taken.
    pub step_in_epoch: u64,
    /// Steps taken over the whole run.
    pub global_step: u64,
    /// Samples of the epoch consumed by all ranks together.
    pub samples_in_epoch: u64,
    /// The world size that consumed them (the sampler's shards depend on it).
    pub world: u64,
}

impl Position {
    /// Whether the epoch in progress has already begun (mid-epoch resume).
    pub fn is_mid_epoch(&self) -> bool {
        self.samples_in_epoch > 0 || self.step_in_epoch > 0
    }
}

/// What a rank that hands its training state to the others (rank 0 resuming from disk, the
/// source of a regroup: Note [A regroup]) broadcasts ahead of it: where the run stands, if
/// anywhere, and how many bytes of optimizer state follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Handover {
    /// `None`: nothing to resume from.
    pub position: Option<Position>,
    /// `None`: the optimizer keeps no state (or the checkpoint holds none).
    pub optim_bytes: Option<usize>,
}

impl Handover {
    /// Broadcasts `self` from rank `root` (the others' `self` is ignored) and returns it.
    pub fn broadcast(self, pg: &ProcessGroup, root: usize) -> Result<Handover> {
        let p = self.position.unwrap_or_default();
        let mut words = [
            i64::from(self.position.is_some()),
            p.epoch as i64,
            p.step_in_epoch as i64,
            p.global_step as i64,
            p.samples_in_epoch as i64,
            p.world as i64,
            self.optim_bytes.map_or(-1, |n| n as i64),
        ];
        pg.broadcast(&mut words, root)?;
        Ok(Handover {
            position: (words[0] == 1).then_some(Position {
                epoch: words[1] as u64,
                step_in_epoch: words[2] as u64,
                global_step: words[3] as u64,
                samples_in_epoch: words[4] as u64,
                world: words[5] as u64,
            }),
            optim_bytes: usize::try_from(words[6]).ok(),
        })
    }

    /// Broadcasts the optimizer state this header announced: `state` on `root`, returned on
    /// every rank (`None` when there is none).
    pub fn broadcast_optim_state(
        &self,
        pg: &ProcessGroup,
        root: usize,
        state: Option<Vec<u8>>,
    ) -> Result<Option<Vec<u8>>> {
        let Some(n) = self.optim_bytes.filter(|&n| n > 0) else {
            return Ok(None);
        };
        let mut state = state.unwrap_or_default();
        state.resize(n, 0);
        pg.broadcast(&mut state, root)?;
        Ok(Some(state))
    }
}

/// The indices rank `rank` of `world` trains on in `epoch`, after `skip_samples` samples of the
/// epoch were already consumed by a run of `prev_world` ranks.
pub fn epoch_indices(
    len: usize,
    world: usize,
    rank: usize,
    seed: u64,
    epoch: u64,
    skip_samples: usize,
    prev_world: usize,
) -> Result<Vec<usize>> {
    let sampler = DistributedSampler::new(len, world, rank)?.with_seed(seed);
    if skip_samples == 0 {
        return Ok(sampler.indices(epoch));
    }
    if prev_world == world {
        let mine = sampler.indices(epoch);
        let skip = (skip_samples / world).min(mine.len());
        return Ok(mine[skip..].to_vec());
    }
    // The global order (one replica: the permutation without padding), then the previous
    // run's padding rule: positions past `len` wrap to the start.
    let perm = DistributedSampler::new(len, 1, 0)?
        .with_seed(seed)
        .indices(epoch);
    let rest: Vec<usize> = (skip_samples..)
        .take_while(|&p| p < len.div_ceil(prev_world) * prev_world)
        .map(|p| perm[p % len])
        .collect();
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    let per_rank = rest.len().div_ceil(world);
    Ok((0..per_rank)
        .map(|k| rest[(k * world + rank) % rest.len()])
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_world_skips_the_ranks_own_prefix() {
        let full = epoch_indices(100, 2, 1, 3, 4, 0, 2).unwrap();
        let rest = epoch_indices(100, 2, 1, 3, 4, 20, 2).unwrap();
        assert_eq!(rest, full[10..]);
    }

    #[test]
    fn other_world_covers_exactly_the_unseen_samples() {
        // 2 ranks consumed 3 steps of 5: global positions 0..30 of the padded order.
        let (len, seed, epoch) = (97, 1, 2);
        let seen: Vec<usize> = (0..2)
            .flat_map(|r| epoch_indices(len, 2, r, seed, epoch, 0, 2).unwrap()[..15].to_vec())
            .collect();
        let mut rest: Vec<usize> = (0..3)
            .flat_map(|r| epoch_indices(len, 3, r, seed, epoch, 30, 2).unwrap())
            .collect();
        let lens: Vec<usize> = (0..3)
            .map(|r| epoch_indices(len, 3, r, seed, epoch, 30, 2).unwrap().len())
            .collect();
        assert!(
            lens.iter().all(|&l| l == lens[0]),
            "equal steps on every rank: {lens:?}"
        );
        let mut all = seen.clone();
        all.append(&mut rest);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all, (0..len).collect::<Vec<_>>());
    }
}
