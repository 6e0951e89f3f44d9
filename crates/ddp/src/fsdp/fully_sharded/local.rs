//! What a step holds between its collectives and its optimizer step, and what a rank holds
//! after its group failed (Note [Commit vote]): [`Prepared`], [`LocalShard`], [`PendingStep`].
//! Plain values: nothing here runs a collective.

use std::ops::Range;

use crate::adapter::burn::GradientsParams;
use crate::adapter::shard::ShardParams;
use crate::adapter::ParamInfo;
use crate::step_header::Agreement;
use crate::Result;

/// A held step's averaged gradients, waiting for the commit vote (Note [Commit vote]).
#[derive(Debug)]
pub(super) struct Prepared {
    /// Each unit's averaged (and clipped) gradients of this rank's block of it.
    pub(super) held: Vec<(usize, Vec<f32>)>,
    pub(super) agreement: Agreement,
}

/// What one rank of a sharded model holds (`FullyShardedDataParallel::into_local`).
#[derive(Debug)]
pub struct LocalShard<M> {
    /// The module: buffers, frozen and discrete tensors whole; trainable tensors whole, or
    /// empty where parameters are sharded.
    pub module: M,
    /// This rank's pieces: trainable parameter (index into `infos`), the elements of it the
    /// piece holds, their values.
    pub pieces: Vec<(usize, Range<usize>, Vec<f32>)>,
    /// Names and shapes of the trainable parameters, in canonical order.
    pub infos: Vec<ParamInfo>,
    /// A step whose commit vote failed on this rank: its gradients, kept in case another
    /// rank's vote completed (Note [Commit vote]).
    pub pending: Option<PendingStep>,
}

/// A step prepared on a rank and not taken ([`LocalShard::pending`]).
#[derive(Debug)]
pub struct PendingStep {
    /// The shard as the step found it (ids and device for the optimizer).
    pub(super) shard: ShardParams,
    /// Each updated piece (index into [`LocalShard::pieces`]) and its averaged gradient.
    pub(super) grads: Vec<(usize, Vec<f32>)>,
}

impl<M> LocalShard<M> {
    /// Takes the pending step with `step` (the optimizer that would have taken it), when
    /// there is one: another rank's vote completed, so every rank was to take it (Note
    /// [Commit vote]). Returns whether there was one.
    pub fn commit_pending(
        &mut self,
        step: impl FnOnce(ShardParams, GradientsParams) -> ShardParams,
    ) -> Result<bool> {
        let Some(PendingStep { shard, grads }) = self.pending.take() else {
            return Ok(false);
        };
        let mut params = GradientsParams::new();
        for (piece, grad) in grads {
            shard.register_grad(piece, grad, &mut params);
        }
        let shard = step(shard, params);
        for (i, piece) in self.pieces.iter_mut().enumerate() {
            piece.2 = shard.value(i)?;
        }
        Ok(true)
    }
}

/// How a step applies the averaged gradients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Apply {
    /// Each bucket stepped as it arrives.
    Fused,
    /// Every bucket held until all arrived, then stepped.
    Held,
    /// Held, then clipped to this global norm and stepped.
    Clipped(f32),
}
