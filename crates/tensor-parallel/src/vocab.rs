//! The vocabulary split across a tensor-parallel group: the token embedding by rows
//! ([`VocabParallelEmbedding`], Megatron's `VocabParallelEmbedding`), and the cross-entropy of
//! logits split by vocabulary columns without gathering them ([`loss_parallel`], PyTorch's
//! `loss_parallel`), with the arg-max for accuracy ([`argmax_parallel`]).
//!
//! Note [Vocabulary parallelism]
//! A language model's embedding and head are `vocab × d` each, the largest matrices of a small
//! model, and the logits `[tokens, vocab]` its largest activation. Rank `r` of `n` holds the
//! `r`-th of `n` equal ranges of the vocabulary:
//! - the embedding's rows of its tokens: each rank looks up the tokens in its range (the others
//!   give zeros), and `g` sums the ranks' rows, so every rank has every token's embedding; in
//!   the backward only the rows of the rank's own tokens get a gradient;
//! - the head's columns (`ColwiseParallel`), so each rank has its tokens' logits;
//! - the loss, from those: the row maximum all-reduced by `MAX` (a shift for stability, no
//!   gradient through it), the sum of exponentials and the target's logit each summed through
//!   `g` (the target's logit is on one rank, zero on the others). `loss = log Σ exp(z - m) -
//!   (z_t - m)`, and its gradient on each rank is its columns of `softmax(z) - onehot(t)`, the
//!   whole one's slice, with no logits moved: the collectives carry `3 × tokens` values
//!   instead of `tokens × vocab`.
//!
//! The sums add the ranks' parts in another order than one rank adds them, so the loss agrees
//! with the whole model's to float rounding, not bit for bit.

use std::sync::Arc;

use burn::nn::Embedding;
use burn::tensor::{Device, Int, Tensor, TensorData};
use phalanx_core::ReduceOp;
use phalanx_pg::ProcessGroup;

use crate::placement::shard_range;
use crate::region::reduce_from_region;
use crate::sequence::reduce_scatter_sequence;
use crate::style::piece;
use crate::Result;

/// The token embedding split by vocabulary rows (Note [Vocabulary parallelism]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VocabParallelEmbedding;

impl VocabParallelEmbedding {
    /// Rank `rank`'s rows of the whole `[vocab, d]` table (every rank passes the same one).
    pub fn shard(whole: Embedding, rank: usize, size: usize) -> Result<Embedding> {
        let [vocab, d] = whole.weight.dims();
        let rows = shard_range("vocabulary rows", vocab, rank, size)?;
        Ok(Embedding {
            weight: piece(&whole.weight, whole.weight.val().slice([rows, 0..d])),
        })
    }

    /// The embeddings `[batch, seq, d]` of `tokens` (whole vocabulary ids), from rank's rows
    /// `piece` and the other ranks' through `g`.
    pub fn forward(
        piece: &Embedding,
        tokens: Tensor<2, Int>,
        group: &Arc<ProcessGroup>,
    ) -> Tensor<3> {
        reduce_from_region(Self::partial(piece, tokens, group), group)
    }

    /// As [`forward`](Self::forward) with the output split along the sequence: each rank's
    /// positions `[batch, seq / n, d]` of the sum, by a reduce-scatter (Note [Sequence
    /// parallelism]).
    pub fn forward_to_shards(
        piece: &Embedding,
        tokens: Tensor<2, Int>,
        group: &Arc<ProcessGroup>,
    ) -> Tensor<3> {
        reduce_scatter_sequence(Self::partial(piece, tokens, group), group)
    }

    /// The rows of the tokens in this rank's range, zeros for the others'.
    fn partial(piece: &Embedding, tokens: Tensor<2, Int>, group: &ProcessGroup) -> Tensor<3> {
        let [batch, seq] = tokens.dims();
        let rows = piece.weight.dims()[0];
        let device = tokens.device();
        let (local, mine) = local_ids(ids(tokens), rows, group.rank());
        let local = Tensor::<2, Int>::from_data(TensorData::new(local, [batch, seq]), &device);
        let mine = Tensor::<3>::from_data(TensorData::new(mine, [batch, seq, 1]), &device);
        piece.forward(local) * mine
    }
}

/// The mean cross-entropy of `logits` (`[rows, vocab / n]`, this rank's columns of the whole
/// logits) against `targets` (`[rows]`, whole vocabulary ids), with its gradient: Note
/// [Vocabulary parallelism]. Every rank of `group` gets the same loss.
pub fn loss_parallel(
    logits: Tensor<2>,
    targets: Tensor<1, Int>,
    group: &Arc<ProcessGroup>,
) -> Result<Tensor<1>> {
    let [rows, columns] = logits.dims();
    let device = logits.device();
    // The shift: the whole row's maximum, a constant of the graph.
    let local_max = logits.clone().detach().max_dim(1);
    let max = allreduce_plain(local_max, ReduceOp::Max, group)?;
    let shifted = logits - max;
    let sum_exp = reduce_from_region(shifted.clone().exp().sum_dim(1), group);
    let (local, mine) = local_ids(ids(targets), columns, group.rank());
    let local = Tensor::<2, Int>::from_data(TensorData::new(local, [rows, 1]), &device);
    let mine = Tensor::<2>::from_data(TensorData::new(mine, [rows, 1]), &device);
    let target = reduce_from_region(shifted.gather(1, local) * mine, group);
    Ok((sum_exp.log() - target).mean())
}

/// The whole vocabulary's arg-max of each row (`[rows]`) from this rank's columns `logits`:
/// the first index of the maximum, as `argmax` of the whole logits gives (a tie between ranks
/// goes to the lower rank, whose columns come first). A collective of `group`; no gradient.
pub fn argmax_parallel(logits: Tensor<2>, group: &Arc<ProcessGroup>) -> Result<Tensor<1, Int>> {
    let [rows, columns] = logits.dims();
    let device = logits.device();
    let logits = logits.detach();
    let values = floats(logits.clone().max_dim(1));
    let index = ids(logits.argmax(1).reshape([rows]));
    let n = group.world_size();
    let (mut all_values, mut all_index) = (vec![0f32; rows * n], vec![0i64; rows * n]);
    group.allgather(&values, &mut all_values)?;
    group.allgather(&index, &mut all_index)?;
    let best = (0..rows)
        .map(|row| {
            let mut best = 0;
            for rank in 1..n {
                // Strictly greater: on a tie the lower rank's (lower) index stays.
                if all_values[rank * rows + row] > all_values[best * rows + row] {
                    best = rank;
                }
            }
            (best * columns) as i64 + all_index[best * rows + row]
        })
        .collect::<Vec<_>>();
    Ok(Tensor::from_data(TensorData::new(best, [rows]), &device))
}

/// For each whole id, its row in rank `rank`'s range of `per` ids (0 when outside it), and 1.0
/// where it is inside, 0.0 where not.
fn local_ids(ids: Vec<i64>, per: usize, rank: usize) -> (Vec<i64>, Vec<f32>) {
    let start = (rank * per) as i64;
    ids.into_iter()
        .map(|id| match (id - start) as u64 {
            local if local < per as u64 => (local as i64, 1.0),
            _ => (0, 0.0),
        })
        .unzip()
}

/// `t`'s values as `i64`.
fn ids<const D: usize>(t: Tensor<D, Int>) -> Vec<i64> {
    t.into_data()
        .convert::<i64>()
        .try_into_vec()
        .expect("integer tensor values")
}

/// `t`'s values as `f32`.
fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec()
        .expect("float tensor values")
}

/// `t` reduced element-wise over `group` by `op`, outside the autodiff graph.
fn allreduce_plain<const D: usize>(
    t: Tensor<D>,
    op: ReduceOp,
    group: &ProcessGroup,
) -> Result<Tensor<D>> {
    let (device, shape): (Device, _) = (t.device(), t.dims());
    let mut values = floats(t);
    group.allreduce(&mut values, op)?;
    Ok(Tensor::from_data(TensorData::new(values, shape), &device))
}
