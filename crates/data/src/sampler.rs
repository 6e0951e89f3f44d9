//! `DistributedSampler`: which samples each rank sees, identical to PyTorch's.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::randperm::randperm;

/// Splits `0..len` among `num_replicas` ranks exactly as
/// `torch.utils.data.DistributedSampler` does.
///
/// Steps of [`indices`](Self::indices), for epoch `e`:
/// 1. `randperm(len)` from a generator seeded with `seed + e` (or `0..len` without shuffle);
/// 2. without `drop_last`, pad to [`total_size`](Self::total_size) by repeating the list from
///    its start; with `drop_last`, truncate to it;
/// 3. rank `r` takes positions `r, r + num_replicas, r + 2 * num_replicas, …`.
///
/// The epoch is an argument rather than state (PyTorch's `set_epoch`), so forgetting to
/// advance it — and seeing the same order every epoch — cannot happen silently.
///
/// ```
/// use phalanx_data::DistributedSampler;
/// let s = DistributedSampler::new(10, 4, 1)?.with_seed(0);
/// assert_eq!(s.num_samples(), 3);
/// assert_eq!(s.total_size(), 12);
/// // randperm(10) with seed 0 is [4, 1, 7, 5, 3, 9, 0, 8, 6, 2], padded with [4, 1];
/// // rank 1 takes positions 1, 5 and 9.
/// assert_eq!(s.indices(0), [1, 9, 2]);
/// # Ok::<(), phalanx_data::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributedSampler {
    len: usize,
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
}

impl DistributedSampler {
    /// A sampler over a dataset of `len` samples, for `rank` out of `num_replicas`; shuffled,
    /// seed 0, no `drop_last` (PyTorch's defaults).
    pub fn new(len: usize, num_replicas: usize, rank: usize) -> Result<Self> {
        check_rank(num_replicas, rank)?;
        Ok(Self {
            len,
            num_replicas,
            rank,
            shuffle: true,
            seed: 0,
            drop_last: false,
        })
    }

    /// Shuffle every epoch (default `true`).
    pub fn with_shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// Base seed; every rank must use the same one (default 0).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Drop the tail so that every rank gets the same number of samples without padding
    /// (default `false`). Fails when `len < num_replicas`: every rank would be empty.
    pub fn with_drop_last(mut self, drop_last: bool) -> Result<Self> {
        if drop_last && self.len < self.num_replicas {
            return Err(Error::DropLastTooFew {
                len: self.len,
                num_replicas: self.num_replicas,
            });
        }
        self.drop_last = drop_last;
        Ok(self)
    }

    /// Samples per rank per epoch: `ceil(len / R)`, or `floor(len / R)` with `drop_last`
    /// (PyTorch writes the latter `ceil((len - R) / R)` when `len % R != 0`).
    pub fn num_samples(&self) -> usize {
        if self.drop_last {
            self.len / self.num_replicas
        } else {
            self.len.div_ceil(self.num_replicas)
        }
    }

    /// `num_samples() * num_replicas`: the padded (or truncated) length of one epoch.
    pub fn total_size(&self) -> usize {
        self.num_samples() * self.num_replicas
    }

    /// The dataset length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the dataset is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// This sampler's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of replicas (the world size).
    pub fn num_replicas(&self) -> usize {
        self.num_replicas
    }

    /// The seed of `epoch`'s permutation, as PyTorch computes it (`seed + epoch`); the
    /// generator keeps its low 32 bits. Past `u64::MAX` the sum wraps (PyTorch raises
    /// "Overflow when unpacking long long" there instead).
    pub fn epoch_seed(&self, epoch: u64) -> u64 {
        self.seed.wrapping_add(epoch)
    }

    /// This rank's sample indices for `epoch`, `num_samples()` of them.
    pub fn indices(&self, epoch: u64) -> Vec<usize> {
        let order = if self.shuffle {
            randperm(self.len, self.epoch_seed(epoch))
        } else {
            (0..self.len).collect()
        };
        // Padding repeats the list from its start (`indices[:pad]`, or the list repeated
        // ceil(pad/len) times when pad > len): position p of the padded list is order[p % len].
        // total_size > 0 implies len > 0, so the modulo is safe.
        (self.rank..self.total_size())
            .step_by(self.num_replicas)
            .map(|p| order[p % self.len])
            .collect()
    }
}

/// Exact-evaluation sharding: rank `rank`'s contiguous, non-padded slice of `0..len`.
///
/// The shards of all ranks tile `0..len` exactly once (the first `len % num_replicas` ranks
/// get one sample more), so metrics summed over ranks count every sample once — unlike
/// [`DistributedSampler`], whose padding repeats samples.
///
/// ```
/// use phalanx_data::exact_shard;
/// assert_eq!(exact_shard(10, 4, 0)?, 0..3);
/// assert_eq!(exact_shard(10, 4, 3)?, 8..10);
/// # Ok::<(), phalanx_data::Error>(())
/// ```
pub fn exact_shard(len: usize, num_replicas: usize, rank: usize) -> Result<Range<usize>> {
    check_rank(num_replicas, rank)?;
    let (base, extra) = (len / num_replicas, len % num_replicas);
    let start = rank * base + rank.min(extra);
    let size = base + usize::from(rank < extra);
    Ok(start..start + size)
}

fn check_rank(num_replicas: usize, rank: usize) -> Result<()> {
    if num_replicas == 0 {
        return Err(Error::ZeroReplicas);
    }
    if rank >= num_replicas {
        return Err(Error::InvalidRank { rank, num_replicas });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_arguments_are_errors() {
        assert!(matches!(
            DistributedSampler::new(10, 0, 0),
            Err(Error::ZeroReplicas)
        ));
        assert!(matches!(
            DistributedSampler::new(10, 2, 2),
            Err(Error::InvalidRank {
                rank: 2,
                num_replicas: 2
            })
        ));
        let e = DistributedSampler::new(3, 4, 0)
            .unwrap()
            .with_drop_last(true);
        assert!(matches!(
            e,
            Err(Error::DropLastTooFew {
                len: 3,
                num_replicas: 4
            })
        ));
        assert!(exact_shard(5, 0, 0).is_err());
        assert!(exact_shard(5, 2, 2).is_err());
    }

    #[test]
    fn padding_cycles_when_pad_exceeds_len() {
        // len 1, 8 replicas: every rank sees sample 0 (PyTorch's `indices * ceil(pad/len)`).
        for rank in 0..8 {
            let s = DistributedSampler::new(1, 8, rank).unwrap();
            assert_eq!(s.indices(5), [0]);
        }
        // len 3, 8 replicas, no shuffle: [0,1,2,0,1,2,0,1].
        let got: Vec<_> = (0..8)
            .map(|r| {
                DistributedSampler::new(3, 8, r)
                    .unwrap()
                    .with_shuffle(false)
                    .indices(0)[0]
            })
            .collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2, 0, 1]);
    }

    #[test]
    fn drop_last_truncates() {
        let s = DistributedSampler::new(10, 4, 3)
            .unwrap()
            .with_shuffle(false)
            .with_drop_last(true)
            .unwrap();
        assert_eq!(s.num_samples(), 2);
        assert_eq!(s.total_size(), 8);
        assert_eq!(s.indices(0), [3, 7]);
    }

    #[test]
    fn epochs_differ_and_seed_wraps_to_low_bits() {
        let s = DistributedSampler::new(100, 1, 0).unwrap();
        assert_ne!(s.indices(0), s.indices(1));
        let high = s.clone().with_seed((1 << 32) + 7);
        assert_eq!(high.indices(0), s.clone().with_seed(7).indices(0));
    }

    #[test]
    fn empty_dataset() {
        let s = DistributedSampler::new(0, 3, 2).unwrap();
        assert_eq!(s.num_samples(), 0);
        assert!(s.indices(0).is_empty());
        assert_eq!(exact_shard(0, 3, 2).unwrap(), 0..0);
    }
}
