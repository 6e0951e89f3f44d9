//! Properties of the sampler that hold for every (len, replicas, seed, epoch, flags).

use std::collections::HashMap;

use phalanx_data::{exact_shard, DistributedSampler};
use proptest::prelude::*;

fn all_ranks(
    len: usize,
    replicas: usize,
    seed: u64,
    shuffle: bool,
    drop: bool,
) -> Vec<DistributedSampler> {
    (0..replicas)
        .map(|rank| {
            DistributedSampler::new(len, replicas, rank)
                .unwrap()
                .with_seed(seed)
                .with_shuffle(shuffle)
                .with_drop_last(drop)
                .unwrap()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn shares_are_even_cover_the_data_and_overlap_only_by_padding(
        len in 0usize..3000,
        replicas in 1usize..9,
        seed in any::<u64>(),
        epoch in 0u64..1000,
        shuffle in any::<bool>(),
        drop in any::<bool>(),
    ) {
        let drop = drop && len >= replicas;
        let samplers = all_ranks(len, replicas, seed, shuffle, drop);
        let shares: Vec<Vec<usize>> = samplers.iter().map(|s| s.indices(epoch)).collect();
        let num_samples = samplers[0].num_samples();
        let mut seen: HashMap<usize, usize> = HashMap::new();
        for share in &shares {
            prop_assert_eq!(share.len(), num_samples);
            for &i in share {
                prop_assert!(i < len);
                *seen.entry(i).or_default() += 1;
            }
        }
        let total = samplers[0].total_size();
        prop_assert_eq!(total, num_samples * replicas);
        if drop {
            // Every sample at most once; exactly `total` distinct samples, fewer than R dropped.
            prop_assert!(seen.values().all(|&c| c == 1));
            prop_assert_eq!(seen.len(), total);
            prop_assert!(len - total < replicas);
        } else {
            // The union covers the dataset, and the duplicates are exactly the padding.
            prop_assert_eq!(seen.len(), len);
            let duplicates: usize = seen.values().map(|&c| c - 1).sum();
            prop_assert_eq!(duplicates, total - len);
            prop_assert!(total - len < replicas);
        }
    }

    #[test]
    fn same_seed_and_epoch_give_one_permutation_on_every_rank(
        len in 1usize..2000,
        replicas in 1usize..9,
        seed in any::<u64>(),
        epoch in 0u64..1000,
    ) {
        // Interleaving the ranks' shares rebuilds one global order, which must be the same
        // whichever rank's sampler object computes it (they share nothing but the arguments).
        let shares: Vec<Vec<usize>> = all_ranks(len, replicas, seed, true, false)
            .iter()
            .map(|s| s.indices(epoch))
            .collect();
        let global: Vec<usize> = (0..shares[0].len())
            .flat_map(|k| shares.iter().map(move |s| s[k]))
            .collect();
        let mut perm = phalanx_data::randperm(len, seed.wrapping_add(epoch));
        let pad: Vec<usize> = perm.iter().cycle().take(global.len() - len).copied().collect();
        perm.extend(pad);
        prop_assert_eq!(&global, &perm);
        // And a second, independent computation on the same rank agrees.
        let again = DistributedSampler::new(len, replicas, replicas - 1).unwrap().with_seed(seed);
        prop_assert_eq!(again.indices(epoch), shares[replicas - 1].clone());
    }

    #[test]
    fn exact_shards_tile_the_data(len in 0usize..100_000, replicas in 1usize..65) {
        let mut next = 0;
        let mut sizes = Vec::new();
        for rank in 0..replicas {
            let shard = exact_shard(len, replicas, rank).unwrap();
            prop_assert_eq!(shard.start, next);
            next = shard.end;
            sizes.push(shard.len());
        }
        prop_assert_eq!(next, len);
        let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        prop_assert!(max - min <= 1);
    }
}

#[test]
fn epochs_reshuffle() {
    let s = DistributedSampler::new(1000, 4, 2).unwrap();
    assert_ne!(s.indices(0), s.indices(1));
    assert_eq!(s.indices(3), s.indices(3));
}
