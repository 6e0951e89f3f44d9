//! Which rank owns which elements of every trainable parameter ([`Ownership`]), and how a
//! group of parameters travels in one collective ([`Unit`]): pure functions of the parameter
//! sizes, DDP's buckets and the world size.
//!
//! Note [Shard layout]
//! Every sharding mode gives each element of each trainable parameter one owner rank, the only
//! rank that keeps its optimizer state (and, under `grad` and `full`, its averaged gradient,
//! and under `full` its value between steps). The owner is the rank that DDP's allreduce
//! finishes that element on: DDP averages bucket `b` of `L` elements (plus the step header
//! riding at the end of the first one, Note [Step header]) and segment `s` of it ends its
//! canonical fold on rank `s` (Note [Canonical reduction order] in phalanx-collectives). So
//! rank `s` owns segment `s` of every DDP bucket.
//!
//! Why DDP's buckets and not one flat buffer cut in `world` equal parts (ZeRO's and FSDP1's
//! flat parameter): a reduce-scatter folds block `s` in the order that ends on rank `s`, so
//! when the blocks are DDP's segments every averaged gradient element gets the bits DDP's
//! allreduce gives it, whatever the world size, and the sharded modes are bitwise DDP (a flat
//! cut would group the `world`-term sums differently from DDP's, and differ in the last bits
//! from 3 ranks on). Every segment is within one bucket, so each rank owns one contiguous
//! range of each parameter (possibly empty), and a shard is balanced to within one element
//! per bucket.
//!
//! The collectives move [`Unit`]s: a group of parameters laid out *owner-major* (the elements
//! rank 0 owns, parameter by parameter, then rank 1's, …), so that each owner's elements are
//! one block of a `reduce_scatter_v` and of an `allgather_v`. A DDP bucket is its own
//! owner-major layout (its segments are in order); under `full` a unit is one wrapped block
//! (`FullyShard`), whose parameters may come from several buckets.

use std::ops::Range;

use phalanx_collectives::segments;

/// The owner of every element of every trainable parameter (Note [Shard layout]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    world: usize,
    /// `ranges[p][s]`: the elements of trainable parameter `p` that rank `s` owns.
    ranges: Vec<Vec<Range<usize>>>,
}

impl Ownership {
    /// From DDP's buckets over parameters of `numels` elements: bucket `k` lists parameter
    /// indices in packing order and is averaged with `pads[k]` more elements at its end (the
    /// step header, or 0); segment `s` of it belongs to rank `s`. Every parameter is in one
    /// bucket.
    ///
    /// ```
    /// use phalanx_ddp::layout::Ownership;
    /// // Two parameters of 5 and 3 elements in one bucket over 2 ranks: segments 0..4, 4..8.
    /// let o = Ownership::from_buckets(&[5, 3], &[vec![1, 0]], &[0], 2);
    /// assert_eq!((o.range(1, 0), o.range(0, 0), o.range(0, 1)), (0..3, 0..1, 1..5));
    /// ```
    pub fn from_buckets(
        numels: &[usize],
        buckets: &[Vec<usize>],
        pads: &[usize],
        world: usize,
    ) -> Ownership {
        let world = world.max(1);
        let mut ranges = vec![vec![0..0; world]; numels.len()];
        for (k, bucket) in buckets.iter().enumerate() {
            let len: usize = bucket.iter().map(|&p| numels[p]).sum();
            let total = len + pads.get(k).copied().unwrap_or(0);
            let mut at = 0;
            for &p in bucket {
                let param = at..at + numels[p];
                for (s, owned) in ranges[p].iter_mut().enumerate() {
                    let seg = segments::segment(total, world, s);
                    let start = seg.start.max(param.start);
                    let end = seg.end.min(param.end);
                    *owned = match start < end {
                        true => start - param.start..end - param.start,
                        false => 0..0,
                    };
                }
                at = param.end;
            }
        }
        Ownership { world, ranges }
    }

    /// Ranks.
    pub fn world_size(&self) -> usize {
        self.world
    }

    /// Trainable parameters.
    pub fn params(&self) -> usize {
        self.ranges.len()
    }

    /// The elements of parameter `p` that rank `s` owns (empty when none).
    pub fn range(&self, p: usize, s: usize) -> Range<usize> {
        self.ranges[p][s].clone()
    }

    /// The elements rank `s` owns, over all parameters.
    pub fn owned_by(&self, s: usize) -> usize {
        self.ranges.iter().map(|r| r[s].len()).sum()
    }
}

/// A group of parameters that travels in one collective, laid out owner-major (Note [Shard
/// layout]): rank `s`'s elements are block `s`, `offsets[s]..offsets[s + 1]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    params: Vec<usize>,
    offsets: Vec<usize>,
}

/// One owner's part of one parameter within a unit's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// The trainable parameter.
    pub param: usize,
    /// Its elements in this slot.
    pub in_param: Range<usize>,
    /// Where they sit in the unit's buffer.
    pub in_unit: Range<usize>,
}

impl Unit {
    /// The unit of parameters `params` (in this order within each block).
    pub fn new(params: Vec<usize>, ownership: &Ownership) -> Unit {
        let counts: Vec<usize> = (0..ownership.world)
            .map(|s| params.iter().map(|&p| ownership.ranges[p][s].len()).sum())
            .collect();
        Unit {
            params,
            offsets: segments::block_offsets(&counts),
        }
    }

    /// Its parameters.
    pub fn params(&self) -> &[usize] {
        &self.params
    }

    /// Elements in all.
    pub fn len(&self) -> usize {
        *self
            .offsets
            .last()
            .expect("one offset per rank and the total")
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements of each rank's block: the counts of `reduce_scatter_v` and `allgather_v`.
    pub fn counts(&self) -> Vec<usize> {
        self.offsets.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// Rank `s`'s block in the unit's buffer.
    pub fn block(&self, s: usize) -> Range<usize> {
        self.offsets[s]..self.offsets[s + 1]
    }

    /// Rank `s`'s non-empty slots, in order; `in_unit` is relative to the whole buffer.
    pub fn slots<'a>(
        &'a self,
        ownership: &'a Ownership,
        s: usize,
    ) -> impl Iterator<Item = Slot> + 'a {
        let mut at = self.offsets[s];
        self.params.iter().filter_map(move |&p| {
            let owned = ownership.ranges[p][s].clone();
            if owned.is_empty() {
                return None;
            }
            let in_unit = at..at + owned.len();
            at = in_unit.end;
            Some(Slot {
                param: p,
                in_param: owned,
                in_unit,
            })
        })
    }

    /// Every rank's slots, block by block: the whole buffer.
    pub fn all_slots<'a>(&'a self, ownership: &'a Ownership) -> impl Iterator<Item = Slot> + 'a {
        (0..ownership.world).flat_map(move |s| self.slots(ownership, s))
    }
}

// Note [Global norm]
// Gradient clipping by global norm (`clip_grad_norm_`) needs Σ g² over every trainable
// element, and a sum of floats depends on its order. Every mode sums in one order that a
// shard can reproduce: per parameter `p` and owner `s`, the squares of the elements of `p`
// that `s` owns (`Ownership::range(p, s)`), in order, in f64 ([`sum_of_squares`]); then those
// partial sums, parameter by parameter and within a parameter rank by rank ([`fold_norm`]).
// DDP computes every partial sum from its whole averaged gradients; a sharded rank computes
// its own and all-gathers them. The norms are bitwise equal, and so is the clipped step.

/// Σ v² of `values`, in order, in f64 (each square is exact in f64).
pub fn sum_of_squares(values: &[f32]) -> f64 {
    values.iter().map(|&v| f64::from(v) * f64::from(v)).sum()
}

/// The squared global norm from the partial sums of every rank: `by_rank[s][p]` is rank
/// `s`'s sum of squares of parameter `p` (Note [Global norm]).
pub fn fold_norm(by_rank: &[&[f64]], params: usize) -> f64 {
    let mut total = 0f64;
    for p in 0..params {
        for partial in by_rank {
            total += partial[p];
        }
    }
    total
}

/// The squared global norm of whole gradients (`grad(p)` is parameter `p`'s), in the order of
/// Note [Global norm]: what a sharded run computes from its shards.
pub fn norm_squares_of_whole<'a>(ownership: &Ownership, grad: impl Fn(usize) -> &'a [f32]) -> f64 {
    let world = ownership.world_size();
    let partials: Vec<Vec<f64>> = (0..world)
        .map(|s| {
            (0..ownership.params())
                .map(|p| sum_of_squares(&grad(p)[ownership.range(p, s)]))
                .collect()
        })
        .collect();
    let by_rank: Vec<&[f64]> = partials.iter().map(Vec::as_slice).collect();
    fold_norm(&by_rank, ownership.params())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arbitrary() -> impl Strategy<Value = (Vec<usize>, Vec<Vec<usize>>, Vec<usize>, usize)> {
        (
            prop::collection::vec(0usize..40, 1..12),
            1usize..6,
            0usize..3,
            0usize..9,
        )
            .prop_map(|(numels, world, cut, pad)| {
                // Buckets as DDP makes them: consecutive runs of parameters, last first.
                let order: Vec<usize> = (0..numels.len()).rev().collect();
                let step = cut + 1;
                let buckets: Vec<Vec<usize>> = order.chunks(step).map(<[usize]>::to_vec).collect();
                let pads = (0..buckets.len())
                    .map(|k| if k == 0 { pad } else { 0 })
                    .collect();
                (numels, buckets, pads, world)
            })
    }

    proptest! {
        #[test]
        fn every_element_has_exactly_one_owner((numels, buckets, pads, world) in arbitrary()) {
            let o = Ownership::from_buckets(&numels, &buckets, &pads, world);
            for (p, &m) in numels.iter().enumerate() {
                let mut next = 0;
                for s in 0..world {
                    let r = o.range(p, s);
                    if r.is_empty() { prop_assert_eq!(r, 0..0); continue; }
                    prop_assert_eq!(r.start, next);
                    next = r.end;
                }
                prop_assert_eq!(next, m);
            }
            let total: usize = numels.iter().sum();
            prop_assert_eq!((0..world).map(|s| o.owned_by(s)).sum::<usize>(), total);
        }

        #[test]
        fn a_bucket_is_its_own_owner_major_layout((numels, buckets, _pads, world) in arbitrary()) {
            let pads = vec![0; buckets.len()];
            let o = Ownership::from_buckets(&numels, &buckets, &pads, world);
            for bucket in &buckets {
                let unit = Unit::new(bucket.clone(), &o);
                let len: usize = bucket.iter().map(|&p| numels[p]).sum();
                prop_assert_eq!(unit.len(), len);
                for s in 0..world {
                    prop_assert_eq!(unit.block(s), segments::segment(len, world, s));
                }
                // Slot by slot, the unit's buffer is the bucket's packing order.
                let mut bucket_at = std::collections::HashMap::new();
                let mut at = 0;
                for &p in bucket { bucket_at.insert(p, at); at += numels[p]; }
                for slot in unit.all_slots(&o) {
                    prop_assert_eq!(slot.in_unit.start, bucket_at[&slot.param] + slot.in_param.start);
                }
            }
        }

        #[test]
        fn any_unit_tiles_its_buffer((numels, buckets, pads, world) in arbitrary()) {
            let o = Ownership::from_buckets(&numels, &buckets, &pads, world);
            // A unit across buckets: every other parameter.
            let params: Vec<usize> = (0..numels.len()).step_by(2).collect();
            let unit = Unit::new(params.clone(), &o);
            let mut next = 0;
            for slot in unit.all_slots(&o) {
                prop_assert_eq!(slot.in_unit.start, next);
                prop_assert_eq!(slot.in_unit.len(), slot.in_param.len());
                next = slot.in_unit.end;
            }
            prop_assert_eq!(next, params.iter().map(|&p| numels[p]).sum::<usize>());
            prop_assert_eq!(unit.counts().iter().sum::<usize>(), unit.len());
        }
    }

    #[test]
    fn the_step_header_moves_the_segments_of_the_first_bucket() {
        // 8 elements + 4 of header over 2 ranks: segments 0..6 and 6..12, so rank 1 owns 6..8.
        let o = Ownership::from_buckets(&[8], &[vec![0]], &[4], 2);
        assert_eq!((o.range(0, 0), o.range(0, 1)), (0..6, 6..8));
    }
}
