//! phalanx-tensor-parallel: tensor parallelism for Burn models in Megatron-LM's layout, the
//! role of `torch.distributed.tensor.parallel` (`ColwiseParallel`, `RowwiseParallel`).
//!
//! Note [Tensor parallelism]
//! Data parallelism gives every rank the whole model; tensor parallelism splits each layer's
//! matrices across a group of `n` ranks, so each holds and computes `1/n` of them. Megatron's
//! layout needs one collective per direction for a pair of layers:
//! - the first layer of the pair (the MLP's `fc`, the attention's query, key and value) is
//!   split by *output columns* ([`ColwiseParallel`]): its input is whole on every rank, its output
//!   is the rank's columns (its heads, its share of the MLP's width), and whatever is applied
//!   element-wise or per head after it (GELU, the attention itself) needs no communication;
//! - the second (the output projections) is split by *input rows* ([`RowwiseParallel`]): each rank
//!   multiplies its columns by its rows, and the sum over the group of these partial products
//!   is the whole output.
//!
//! The pair is entered through `f` and left through `g` (Note [f and g] in `region.rs`): one
//! all-reduce in the forward (`g`) and one in the backward (`f`), of the activations' size,
//! whatever the width split.
//!
//! Under sequence parallelism (Note [Sequence parallelism] in `sequence.rs`) the activations
//! between the pairs are split along the sequence, and the pair is entered by an all-gather and
//! left by a reduce-scatter instead.
//!
//! ```
//! use std::sync::Arc;
//! use burn::nn::LinearConfig;
//! use burn::tensor::activation::gelu;
//! use burn::tensor::{Device, Distribution, Tensor};
//! use phalanx_tensor_parallel::{ColwiseParallel, RowwiseParallel};
//!
//! // Every rank has the same whole layers (in a real job, each process builds them from the
//! // same seed)…
//! let device = Device::flex();
//! device.seed(7);
//! let fc = LinearConfig::new(8, 32).init(&device);
//! let proj = LinearConfig::new(32, 8).init(&device);
//! let x = Tensor::<2>::random([4, 8], Distribution::Default, &device);
//! // …and two ranks, as threads here, keep their half of each.
//! let outputs = phalanx_testing::spawn_ranks(2, |pg| {
//!     let (rank, group) = (pg.rank(), Arc::new(pg));
//!     let whole = proj.forward(gelu(fc.forward(x.clone())));
//!     let fc = ColwiseParallel::shard(fc.clone(), rank, 2).unwrap();
//!     let proj = RowwiseParallel::shard(proj.clone(), rank, 2).unwrap();
//!     let x = x.clone();
//!     let h = gelu(ColwiseParallel::forward(&fc, x, &group));
//!     let split = RowwiseParallel::forward(&proj, h, &group);
//!     (whole, split)
//! });
//! for (whole, split) in outputs {
//!     whole.into_data().assert_approx_eq::<f32>(&split.into_data(), Default::default());
//! }
//! ```
#![warn(missing_docs, unreachable_pub)]

mod dropout;
mod error;
mod failure;
mod placement;
mod region;
mod sequence;
mod style;
mod vocab;

pub use dropout::dropout_of_shard;
pub use error::{Error, Result};
pub use failure::catch_failures;
pub use placement::{gather_whole, shard_range, Placement};
pub use region::{copy_to_region, reduce_from_region};
pub use sequence::{enter, gather_sequence, reduce_scatter_sequence, SequenceParallel};
pub use style::{ColwiseParallel, RowwiseParallel};
pub use vocab::{argmax_parallel, loss_parallel, VocabParallelEmbedding};
