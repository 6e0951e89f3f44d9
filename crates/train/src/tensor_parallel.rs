//! `--tp N`: a run's model split on the mesh's `"tp"` groups, and the whole parameters
//! gathered back from the pieces (the digest).
//!
//! Note [Tensor-parallel run]
//! The world is a mesh `("pp", P), ("dp", world / (P·N)), ("tp", N)` (Note [Mesh layout] in
//! phalanx-pg; `model_parallel.rs` builds it, and Note [Pipeline run] says what "pp" does): the
//! `N` ranks of a tensor-parallel group are consecutive, so they share a host under phalanx
//! launch's and torchrun's numbering (the group that talks at every layer talks over shared
//! memory), and the data-parallel groups cross hosts. Every rank builds the whole model from the
//! seed and keeps its piece ([`Classifier::tensor_parallel`]). The engine (DDP, or FSDP under
//! `--sharding`) runs on the rank's `"dp"` group: its peers there hold the same piece. The data
//! is sharded over the `"dp"` group too, so the ranks of a tensor-parallel group train on the
//! same batch, as the split model needs. A run's figures (losses, scores) are summed over the
//! `"dp"` group; the digest is of the whole model, gathered over the `"tp"` group, and equal on
//! every rank.

use std::sync::Arc;

use phalanx_ddp::adapter::burn::state_infos;
use phalanx_pg::ProcessGroup;
use phalanx_tensor_parallel::{gather_whole, Placement};

use crate::{with_stable_ids, Classifier, Error, ModelKind, Result, TrainConfig};

/// Whether `--tp size` can split `--model kind`: only the GPT has a split (the CLI asks before
/// it starts the ranks, the trainer again for a caller of the library).
pub fn check_model(kind: ModelKind, size: usize) -> Result<()> {
    if size > 1 && kind != ModelKind::Gpt {
        return Err(Error::Config(format!(
            "--tp {size} splits a GPT's attention heads and MLP across ranks; --model {kind} has \
             neither: use --model gpt (or --sharding to split the training state)"
        )));
    }
    Ok(())
}

/// Whether `--sequence-parallel` fits `--tp size` and `--seq-len seq_len`: it needs a
/// tensor-parallel group, and equal ranges of the sequence (the CLI asks before it starts the
/// ranks, the trainer again for a caller of the library).
pub fn check_sequence_parallel(size: usize, seq_len: usize) -> Result<()> {
    if size < 2 {
        return Err(Error::Config(format!(
            "--sequence-parallel splits the activations between the tensor-parallel regions \
             along the sequence, among the ranks of a tensor-parallel group: it needs --tp 2 \
             or more (got --tp {size})"
        )));
    }
    if !seq_len.is_multiple_of(size) {
        return Err(Error::Config(format!(
            "--sequence-parallel splits each window's --seq-len {seq_len} positions among the \
             {size} ranks of --tp {size}; it must be a multiple of {size}"
        )));
    }
    Ok(())
}

/// Where a rank's float tensor sits on its tensor-parallel group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TpPlace {
    /// How the tensor is placed.
    pub(crate) placement: Placement,
    /// The rank's place in the group.
    pub(crate) rank: usize,
    /// The group's ranks.
    pub(crate) size: usize,
}

/// A run's tensor-parallel group, and where the model's pieces are.
#[derive(Debug)]
pub(crate) struct TensorParallel {
    /// This rank's tensor-parallel group: the model's.
    tp: Arc<ProcessGroup>,
    /// Each float tensor's placement and the shape of this rank's piece, in canonical order.
    pieces: Vec<(Placement, Vec<usize>)>,
}

impl TensorParallel {
    /// Splits `cfg`'s model on the tensor-parallel group `tp` (Note [Tensor-parallel run]),
    /// under `--sequence-parallel` too. Refused, naming the numbers, for a model without a
    /// split.
    pub(crate) fn split<M: Classifier>(
        tp: Arc<ProcessGroup>,
        cfg: &TrainConfig,
        model: M,
    ) -> Result<(TensorParallel, M)> {
        let size = tp.world_size();
        check_model(cfg.model, size)?;
        if cfg.sequence_parallel {
            check_sequence_parallel(size, cfg.seq_len)?;
        }
        let model = model
            .tensor_parallel(tp.clone(), cfg.sequence_parallel)
            .map_err(Error::Config)?;
        // New pieces are new parameters: they take their positions' ids again (Note [Stable
        // parameter ids]).
        let model = with_stable_ids(model);
        let placements = model.placements();
        let shapes: Vec<Vec<usize>> = state_infos(&model)
            .into_iter()
            .filter(|s| s.kind.is_float())
            .map(|s| s.info.shape)
            .collect();
        if placements.len() != shapes.len() {
            return Err(Error::Config(format!(
                "--tp {size}: the model places {} float tensors on the tensor-parallel group \
                 and has {}",
                placements.len(),
                shapes.len()
            )));
        }
        let pieces = placements.into_iter().zip(shapes).collect();
        Ok((TensorParallel { tp, pieces }, model))
    }

    /// The ranks of a tensor-parallel group.
    pub(crate) fn size(&self) -> usize {
        self.tp.world_size()
    }

    /// The tensor-parallel group.
    pub(crate) fn group(&self) -> &Arc<ProcessGroup> {
        &self.tp
    }

    /// Per float tensor (canonical order), where its piece sits on the group.
    pub(crate) fn places(&self) -> Vec<TpPlace> {
        self.pieces
            .iter()
            .map(|(placement, _)| TpPlace {
                placement: *placement,
                rank: self.tp.rank(),
                size: self.tp.world_size(),
            })
            .collect()
    }

    /// Per float tensor (canonical order), whether this rank's piece counts towards the whole
    /// model's gradient norm: a shard always, a replica on the group's rank 0 only (Note [Norm
    /// across a cut model] in phalanx-ddp).
    pub(crate) fn counted(&self) -> Vec<bool> {
        let first = self.tp.rank() == 0;
        self.pieces
            .iter()
            .map(|(placement, _)| first || *placement != Placement::Replicate)
            .collect()
    }

    /// Float tensor `k` (canonical order) whole from this rank's `piece` of it: a collective
    /// of the tensor-parallel group.
    pub(crate) fn whole_of(&self, k: usize, piece: &[f32]) -> Result<Vec<f32>> {
        let Some((placement, shape)) = self.pieces.get(k) else {
            return Err(Error::Config(format!(
                "tensor parallelism: float tensor {k} where the model has {}",
                self.pieces.len()
            )));
        };
        gather_whole(piece, shape, *placement, &self.tp).map_err(|e| match e {
            // The group's failure names the peer as every other collective's does.
            phalanx_tensor_parallel::Error::Pg(e) => Error::Pg(e),
            other => Error::TensorParallel(other),
        })
    }
}
