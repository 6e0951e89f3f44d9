//! Sequence parallelism (Megatron-LM's, PyTorch's `SequenceParallel` style with
//! `ColwiseParallel(input_layouts=Shard(1))` and `RowwiseParallel(output_layouts=Shard(1))`):
//! between the tensor-parallel regions, the activations are split along the sequence instead of
//! replicated.
//!
//! Note [Sequence parallelism]
//! Without it, what runs between two regions (the LayerNorms, the dropouts, the residual
//! additions) runs whole on every rank of the group: the same work `n` times, and `n` copies of
//! activations `[batch, seq, d]`. With it, rank `r` of `n` holds the `r`-th of `n` equal ranges
//! of the sequence (axis 1), `[batch, seq / n, d]`, and the collectives at the regions' edges
//! change shape, not size:
//! - entering a region ([`gather_sequence`], in place of `f`): forward, an all-gather of the
//!   shards along the sequence (the region's columns need every position); backward, a
//!   reduce-scatter of the gradient (each rank's columns gave a part of every position's
//!   gradient: sum them, and each rank keeps its positions);
//! - leaving it ([`reduce_scatter_sequence`], in place of `g`): forward, a reduce-scatter of the
//!   ranks' partial outputs (the sum, each rank keeping its positions); backward, an all-gather
//!   of the gradient.
//!
//! An all-reduce is a reduce-scatter and an all-gather, so the bytes moved are the same; what
//! is saved is the work and the memory between the regions, `1/n` of it per rank.
//!
//! A parameter used between the regions (a LayerNorm's, the bias of a row-split linear, added
//! after the reduce-scatter) is whole on every rank, but each rank's positions give only a part
//! of its gradient. It enters through `f` ([`enter`]), whose backward sums the parts over the
//! group, so the replicas get the same whole gradient and stay equal, with no collective added
//! to the engine.
//!
//! Dropout between the regions ([`SequenceParallel::dropout`]): every rank draws the mask of the
//! *whole* `[batch, seq, d]` tensor, as every rank does without sequence parallelism, and keeps
//! its positions' slice (Note [Dropout of a shard] in `dropout.rs`). The masks are then the ones
//! of the run without it, bit for bit.
//!
//! ```
//! use std::sync::Arc;
//! use burn::tensor::{Device, Distribution, Tensor};
//! use phalanx_tensor_parallel::{gather_sequence, reduce_scatter_sequence, SequenceParallel};
//!
//! let device = Device::flex();
//! device.seed(3);
//! let whole = Tensor::<3>::random([2, 4, 3], Distribution::Default, &device);
//! let outputs = phalanx_testing::spawn_ranks(2, |pg| {
//!     let group = Arc::new(pg);
//!     // Each rank keeps its two positions; gathered, they are the whole tensor again.
//!     let mine = SequenceParallel::shard(whole.clone(), &group).unwrap();
//!     let gathered = gather_sequence(mine.clone(), &group);
//!     // Every rank holds the whole tensor as a partial sum: the reduce-scatter leaves each
//!     // rank its positions of the sum.
//!     let summed = reduce_scatter_sequence(whole.clone(), &group);
//!     (gathered, summed, mine)
//! });
//! for (gathered, summed, mine) in outputs {
//!     gathered.into_data().assert_eq(&whole.clone().into_data(), true);
//!     summed.into_data().assert_eq(&(mine * 2.0).into_data(), true);
//! }
//! ```

use std::sync::Arc;

use burn::nn::{Dropout, LayerNorm};
use burn::tensor::{Tensor, TensorData};
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::NoCheckpointing;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};
use burn_flex::{Flex, FlexTensor};
use phalanx_core::ReduceOp;
use phalanx_pg::ProcessGroup;

use crate::dropout::dropout_of_shard;
use crate::placement::shard_range;
use crate::region::{copy_to_region, into_ad, Ad, Group};
use crate::Result;

/// Between the regions: the activations split along the sequence (Note [Sequence
/// parallelism]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceParallel;

impl SequenceParallel {
    /// This rank's range of the sequence `0..seq`; refused when the group's size does not
    /// divide it.
    pub fn range(seq: usize, group: &ProcessGroup) -> Result<std::ops::Range<usize>> {
        shard_range("sequence positions", seq, group.rank(), group.world_size())
    }

    /// This rank's positions of a whole `[batch, seq, d]` tensor (no collective; the gradient
    /// of the slice flows to the whole tensor's).
    pub fn shard(x: Tensor<3>, group: &ProcessGroup) -> Result<Tensor<3>> {
        let [batch, seq, d] = x.dims();
        let mine = Self::range(seq, group)?;
        Ok(x.slice([0..batch, mine, 0..d]))
    }

    /// `norm` over this rank's positions `x`, its weight and bias entered through `f` so that
    /// their gradients are the whole sequence's. Burn keeps a `LayerNorm`'s epsilon private:
    /// pass the one `norm` was built with.
    pub fn layer_norm(
        norm: &LayerNorm,
        epsilon: f64,
        x: Tensor<3>,
        group: &Arc<ProcessGroup>,
    ) -> Tensor<3> {
        let gamma = enter(norm.gamma.val(), group);
        let beta = norm.beta.as_ref().map(|b| enter(b.val(), group));
        burn::tensor::module::layer_norm(x, gamma, beta, epsilon)
    }

    /// `drop` on this rank's positions `x` of a `[batch, seq, d]` tensor: the whole tensor's
    /// mask, drawn as every rank draws it, sliced to this rank's positions (Note [Dropout of a
    /// shard]).
    pub fn dropout(drop: &Dropout, x: Tensor<3>, group: &ProcessGroup) -> Tensor<3> {
        dropout_of_shard(drop, x, 1, group)
    }
}

/// A parameter used on this rank's positions, entered through `f`: its gradient summed over
/// the group (Note [Sequence parallelism]).
pub fn enter<const D: usize>(param: Tensor<D>, group: &Arc<ProcessGroup>) -> Tensor<D> {
    copy_to_region(param, group)
}

/// Entering a region from sequence shards: the whole `[batch, seq, d]` from each rank's
/// `[batch, seq / n, d]`, gathered in rank order; in the backward, the gradient summed over the
/// group and each rank's positions kept (Note [Sequence parallelism]).
///
/// # Panics
/// As `copy_to_region`: on another autodiff backend, and when the group's collective fails.
pub fn gather_sequence(x: Tensor<3>, group: &Arc<ProcessGroup>) -> Tensor<3> {
    if !x.device().is_autodiff() {
        let device = x.device();
        let whole = all_gather_seq(FlexTensor::from_data(x.into_data()), group);
        return Tensor::from_data(whole.into_data(), &device);
    }
    let (primitive, guard) = into_ad(x).into_parts();
    let whole = all_gather_seq(primitive, group);
    let out = match GatherSequence
        .prepare::<NoCheckpointing>([guard])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(Group(group.clone()), whole),
        OpsKind::UnTracked(prep) => prep.finish(whole),
    };
    Tensor::from_primitive::<Ad>(out)
}

/// Leaving a region to sequence shards: each rank's positions of the sum over the group of the
/// ranks' partial `[batch, seq, d]`; in the backward, the gradient all-gathered (Note [Sequence
/// parallelism]).
///
/// # Panics
/// As [`gather_sequence`], and when the group's size does not divide the sequence.
pub fn reduce_scatter_sequence(x: Tensor<3>, group: &Arc<ProcessGroup>) -> Tensor<3> {
    if !x.device().is_autodiff() {
        let device = x.device();
        let mine = reduce_scatter_seq(FlexTensor::from_data(x.into_data()), group);
        return Tensor::from_data(mine.into_data(), &device);
    }
    let (primitive, guard) = into_ad(x).into_parts();
    let mine = reduce_scatter_seq(primitive, group);
    let out = match ReduceScatterSequence
        .prepare::<NoCheckpointing>([guard])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(Group(group.clone()), mine),
        OpsKind::UnTracked(prep) => prep.finish(mine),
    };
    Tensor::from_primitive::<Ad>(out)
}

/// [`gather_sequence`]'s node: the gradient reduce-scattered backward.
#[derive(Debug)]
struct GatherSequence;

impl Backward<Flex, 1> for GatherSequence {
    type State = Group;

    fn backward(self, ops: Ops<Group, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let g = grads.consume::<Flex>(&ops.node);
        if let Some(parent) = &ops.parents[0] {
            grads.register::<Flex>(parent.id, reduce_scatter_seq(g, &ops.state.0));
        }
    }
}

/// [`reduce_scatter_sequence`]'s node: the gradient all-gathered backward.
#[derive(Debug)]
struct ReduceScatterSequence;

impl Backward<Flex, 1> for ReduceScatterSequence {
    type State = Group;

    fn backward(self, ops: Ops<Group, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let g = grads.consume::<Flex>(&ops.node);
        if let Some(parent) = &ops.parents[0] {
            grads.register::<Flex>(parent.id, all_gather_seq(g, &ops.state.0));
        }
    }
}

/// The values of a `[batch, seq, d]` tensor as `f32`, and its three dimensions.
fn values3(t: FlexTensor) -> (Vec<f32>, [usize; 3]) {
    let data = t.into_data();
    let dims: [usize; 3] = data.shape().to_vec().try_into().unwrap_or_else(|s| {
        panic!("sequence parallelism moves [batch, seq, d] tensors, not {s:?}")
    });
    let values = data
        .convert::<f32>()
        .try_into_vec()
        .expect("an f32 tensor's values");
    (values, dims)
}

/// A failed collective inside a graph (Note [Failures inside a graph]).
fn failed(op: &str, group: &ProcessGroup, e: phalanx_pg::Error) -> ! {
    crate::failure::failed(&format!("sequence parallelism's {op}"), group, e)
}

/// `[batch, seq / n, d]` on each rank → the whole `[batch, seq, d]`, rank `r`'s positions at
/// `r · seq / n`.
fn all_gather_seq(t: FlexTensor, group: &ProcessGroup) -> FlexTensor {
    let (mine, [batch, local, d]) = values3(t);
    let n = group.world_size();
    let mut all = vec![0f32; mine.len() * n];
    if let Err(e) = group.allgather(&mine, &mut all) {
        failed("all-gather", group, e);
    }
    // The gather is rank-major, `[n, batch, local, d]`; the sequence axis wants `[batch, n ·
    // local, d]`.
    let run = local * d;
    let mut whole = Vec::with_capacity(all.len());
    for b in 0..batch {
        for r in 0..n {
            let at = (r * batch + b) * run;
            whole.extend_from_slice(&all[at..at + run]);
        }
    }
    FlexTensor::from_data(TensorData::new(whole, [batch, local * n, d]))
}

/// The sum over the group of each rank's `[batch, seq, d]`, rank `r` keeping positions `r ·
/// seq / n ..`: `[batch, seq / n, d]`.
fn reduce_scatter_seq(t: FlexTensor, group: &ProcessGroup) -> FlexTensor {
    let (whole, [batch, seq, d]) = values3(t);
    let n = group.world_size();
    let local = shard_range("sequence positions", seq, 0, n)
        .unwrap_or_else(|e| panic!("sequence parallelism: {e}"))
        .len();
    // Rank-major, `[n, batch, local, d]`, the blocks a reduce-scatter hands out in rank order.
    let run = local * d;
    let mut send = Vec::with_capacity(whole.len());
    for r in 0..n {
        for b in 0..batch {
            let at = (b * seq + r * local) * d;
            send.extend_from_slice(&whole[at..at + run]);
        }
    }
    let mut mine = vec![0f32; batch * run];
    if let Err(e) = group.reduce_scatter(&mut send, &mut mine, ReduceOp::Sum) {
        failed("reduce-scatter", group, e);
    }
    FlexTensor::from_data(TensorData::new(mine, [batch, local, d]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_of_a_sequence_the_group_cannot_split_equally_are_refused() {
        let out = phalanx_testing::spawn_ranks(2, |pg| {
            SequenceParallel::range(5, &pg).unwrap_err().to_string()
        });
        assert!(
            out[0].contains("2 ranks cannot split 5 sequence positions"),
            "{}",
            out[0]
        );
    }
}
