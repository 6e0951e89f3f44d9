//! The global gradient norm of a model cut across ranks (tensor or pipeline parallelism):
//! what `clip_grad_norm_` needs when no rank holds every parameter.
//!
//! Note [Norm across a cut model]
//! Under `--tp`/`--pp` an engine (DDP or FSDP) runs on a data-parallel group whose ranks hold
//! one piece of the model: its norm covers that piece only, and clipping by it would scale
//! each piece by its own factor. [`ModelNorm`] completes it. Each rank sums the squares of
//! the parameters it counts (a tensor replicated over a tensor-parallel group, a LayerNorm's
//! weight, is counted on that group's rank 0 only, so that it counts once), then each of the
//! model's groups in turn (tensor-parallel, then pipeline) all-gathers one f64 per rank and
//! sums it in rank order. After the first group every rank of it holds the same value, so
//! after the last every rank of the model replica holds the same squared norm bitwise, and the
//! pieces that are replicas of each other scale by the same factor and stay equal. The data-
//! parallel replicas agree already: their engines average the same gradients. This costs two
//! small all-gathers per clipped step. It is PyTorch's `clip_grad_norm_` over DTensors: the
//! norm of the whole model, to float rounding (the sum runs in another order than one rank's).
//!
//! ```
//! use std::sync::Arc;
//! use phalanx_ddp::ModelNorm;
//!
//! // Two ranks of a tensor-parallel group: a sharded weight (counted on both) and a replicated
//! // bias (counted on rank 0 only).
//! let squares = phalanx_testing::spawn_ranks(2, |pg| {
//!     let rank = pg.rank();
//!     let norm = ModelNorm::new(vec![Arc::new(pg)], vec![true, rank == 0]);
//!     // This rank's sums of squares: its half of the weight, the whole bias.
//!     norm.total(&[[1.0, 4.0][rank], 9.0]).unwrap()
//! });
//! assert_eq!(squares, vec![14.0, 14.0]);
//! ```

use std::sync::Arc;

use phalanx_pg::ProcessGroup;

use crate::{Error, Result};

/// The rest of a cut model's norm: the groups that hold its other pieces, and which of this
/// rank's trainable parameters count towards it (Note [Norm across a cut model]).
#[derive(Debug)]
pub struct ModelNorm {
    groups: Vec<Arc<ProcessGroup>>,
    counted: Vec<bool>,
}

impl ModelNorm {
    /// Sums over `groups` in turn (innermost first); `counted[p]`: whether trainable parameter
    /// `p` (canonical order) of this rank counts.
    pub fn new(groups: Vec<Arc<ProcessGroup>>, counted: Vec<bool>) -> ModelNorm {
        ModelNorm { groups, counted }
    }

    /// The whole model's squared norm from this rank's sums of squares per trainable
    /// parameter (`per_param[p]`, already summed over its data-parallel group): a collective
    /// of every group, bitwise the same on every rank of the model.
    pub fn total(&self, per_param: &[f64]) -> Result<f64> {
        if per_param.len() != self.counted.len() {
            return Err(Error::Options {
                reason: format!(
                    "the model's norm counts {} trainable parameters, the engine holds {}",
                    self.counted.len(),
                    per_param.len()
                ),
            });
        }
        let mut total: f64 = per_param
            .iter()
            .zip(&self.counted)
            .filter(|(_, &counted)| counted)
            .map(|(s, _)| s)
            .sum();
        for group in &self.groups {
            let mut all = vec![0f64; group.world_size()];
            group
                .allgather(&[total], &mut all)
                .map_err(|source| Error::Sync {
                    op: "allgather(gradient norms, across the model's pieces)",
                    source,
                })?;
            total = all.iter().sum();
        }
        Ok(total)
    }
}
