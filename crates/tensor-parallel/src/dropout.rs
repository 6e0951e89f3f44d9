//! Dropout of a tensor split across a tensor-parallel group: [`dropout_of_shard`].
//!
//! Note [Dropout of a shard]
//! The ranks of a tensor-parallel group seed their generators alike and draw the same numbers
//! in the same order. A tensor split on an axis (the attention weights by heads, the residual
//! stream by positions under sequence parallelism) needs a different mask on each rank, and
//! the masks together should be the one a single rank draws for the whole tensor, so that the
//! split run draws what the unsplit one draws. So every rank draws the mask of the *whole*
//! tensor and keeps its slice. Drawing only its part would give every rank the same mask for
//! different heads or positions.
//!
//! The slice is copied into a buffer of its own before it is used: Burn's slices are views,
//! and the autodiff graph keeps the mask until the backward, so a view would keep the whole
//! mask's memory alive on every rank, `n` times what the rank's part needs.

use burn::nn::Dropout;
use burn::tensor::{Distribution, Tensor};
use phalanx_pg::ProcessGroup;

/// `drop` applied to `x`, this rank's part of a tensor split on `axis` into equal parts over
/// `group` (Note [Dropout of a shard]): the whole tensor's mask, as every rank draws it, sliced
/// to this rank's part. The identity where `drop` is: outside training, or with `p` 0.
pub fn dropout_of_shard<const D: usize>(
    drop: &Dropout,
    x: Tensor<D>,
    axis: usize,
    group: &ProcessGroup,
) -> Tensor<D> {
    let p = drop.prob;
    if p == 0.0 || !x.device().is_autodiff() || !drop.training.is_enabled() {
        return x;
    }
    let device = x.device();
    let (rank, n) = (group.rank(), group.world_size());
    let keep = 1.0 - p;
    let local = x.dims();
    let mut whole = local;
    whole[axis] *= n;
    let mask = Tensor::<D>::random(whole, Distribution::Bernoulli(keep), &device);
    let part = local[axis];
    let ranges: [std::ops::Range<usize>; D] = std::array::from_fn(|i| match i == axis {
        true => rank * part..(rank + 1) * part,
        false => 0..local[i],
    });
    // Its own buffer: the view would keep the whole mask alive until the backward.
    let mask = Tensor::<D>::from_data(mask.slice(ranges).into_data(), &device);
    x * mask * (1.0 / keep)
}
