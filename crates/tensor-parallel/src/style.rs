//! How a linear layer is split across a tensor-parallel group, PyTorch's parallel styles: by
//! output columns ([`ColwiseParallel`], Megatron's `ColumnParallelLinear`) and by input rows
//! ([`RowwiseParallel`], `RowParallelLinear`).
//!
//! A style cuts a whole Burn `Linear` into the `Linear` a rank holds, and runs that piece's
//! forward with the collective its place in the pair needs (Note [Tensor parallelism]). The
//! model keeps its own `Linear` fields, so its parameters keep their paths and their order: a
//! checkpoint's names are the whole model's.
//!
//! Burn's `Linear` keeps its weight as `[d_input, d_output]` (the transpose of PyTorch's), so
//! a column split takes a range of the weight's second axis and of the bias, and a row split a
//! range of its first axis. Rank `r` of `n` takes the `r`-th of `n` equal ranges: the layout of
//! Megatron and of a DTensor `Shard` placement, so that the whole weight is the ranks' pieces
//! side by side, in rank order.

use std::sync::Arc;

use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::Tensor;
use phalanx_pg::ProcessGroup;

use crate::placement::shard_range;
use crate::region::{copy_to_region, reduce_from_region};
use crate::sequence::{enter, gather_sequence, reduce_scatter_sequence};
use crate::Result;

/// Split by output columns: a rank holds `d_output / n` columns of the weight and their bias.
/// Its input is whole on every rank; its output is this rank's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColwiseParallel;

/// Split by input rows: a rank holds `d_input / n` rows of the weight, and the whole bias. Its
/// input is this rank's columns of the previous layer's output; its output is whole on every
/// rank: the sum over the group of the ranks' partial products, plus the bias (added once,
/// after the sum).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowwiseParallel;

/// `slice` of the whole parameter `whole` as a parameter of its own. A slice of a tracked
/// tensor is a node of the graph, not a leaf: detached, it is a leaf whose gradient is this
/// rank's part of the whole one's. It keeps the whole one's gradient requirement, so a frozen
/// parameter's pieces stay frozen.
pub(crate) fn piece<const D: usize>(
    whole: &Param<Tensor<D>>,
    slice: Tensor<D>,
) -> Param<Tensor<D>> {
    Param::from_tensor(slice.detach()).set_require_grad(whole.is_require_grad())
}

impl ColwiseParallel {
    /// Rank `rank`'s columns of `whole` (every rank passes the same whole layer).
    pub fn shard(whole: Linear, rank: usize, size: usize) -> Result<Linear> {
        let [d_input, d_output] = whole.weight.dims();
        let cols = shard_range("output columns", d_output, rank, size)?;
        let weight = whole.weight.val().slice([0..d_input, cols.clone()]);
        Ok(Linear {
            weight: piece(&whole.weight, weight),
            bias: whole.bias.map(|b| piece(&b, b.val().slice([cols]))),
        })
    }

    /// `x @ W[:, cols] + b[cols]` of rank's piece `linear`, entered through `f` (Note [f and
    /// g]): the input's gradient is summed over `group` in the backward.
    pub fn forward<const D: usize>(
        linear: &Linear,
        x: Tensor<D>,
        group: &Arc<ProcessGroup>,
    ) -> Tensor<D> {
        linear.forward(copy_to_region(x, group))
    }

    /// As [`forward`](Self::forward) with the input split along the sequence (PyTorch's
    /// `ColwiseParallel(input_layouts=Shard(1))`): `x` is this rank's positions `[batch, seq /
    /// n, d]`, all-gathered to the whole sequence first (Note [Sequence parallelism]).
    pub fn forward_from_shards(
        linear: &Linear,
        x: Tensor<3>,
        group: &Arc<ProcessGroup>,
    ) -> Tensor<3> {
        linear.forward(gather_sequence(x, group))
    }
}

impl RowwiseParallel {
    /// Rank `rank`'s rows of `whole`, and its whole bias.
    pub fn shard(whole: Linear, rank: usize, size: usize) -> Result<Linear> {
        let [d_input, d_output] = whole.weight.dims();
        let rows = shard_range("input rows", d_input, rank, size)?;
        let weight = whole.weight.val().slice([rows, 0..d_output]);
        Ok(Linear {
            weight: piece(&whole.weight, weight),
            bias: whole.bias,
        })
    }

    /// The sum over `group` of `x @ W[rows, :]`, left through `g` (Note [f and g]), then the
    /// bias of rank's piece `linear`.
    pub fn forward<const D: usize>(
        linear: &Linear,
        x: Tensor<D>,
        group: &Arc<ProcessGroup>,
    ) -> Tensor<D> {
        let partial = x.matmul(linear.weight.val().unsqueeze());
        let y = reduce_from_region(partial, group);
        match &linear.bias {
            Some(b) => y + b.val().unsqueeze(),
            None => y,
        }
    }

    /// As [`forward`](Self::forward) with the output split along the sequence (PyTorch's
    /// `RowwiseParallel(output_layouts=Shard(1))`): the partial products reduce-scattered, so
    /// each rank gets its positions `[batch, seq / n, d_output]` of the sum, then the bias,
    /// entered through `f` because each rank's positions give a part of its gradient (Note
    /// [Sequence parallelism]).
    pub fn forward_to_shards(
        linear: &Linear,
        x: Tensor<3>,
        group: &Arc<ProcessGroup>,
    ) -> Tensor<3> {
        let partial = x.matmul(linear.weight.val().unsqueeze());
        let y = reduce_scatter_sequence(partial, group);
        match &linear.bias {
            Some(b) => y + enter(b.val(), group).unsqueeze(),
            None => y,
        }
    }
}
