//! [`Pieces`]: this rank's shard of the trainable parameters (what the optimizer steps) and
//! where each of its pieces sits, in its parameter and in the units that carry it (Note [Shard
//! layout] in `layout.rs`). The blocks share the shard and the piece index (Note [Full
//! sharding]).

use std::ops::Range;
use std::sync::{Arc, Mutex};

use burn::module::ParamId;
use burn::tensor::Device;

use crate::adapter::burn::GradientsParams;
use crate::adapter::shard::ShardParams;
use crate::fsdp::unit::SharedShard;
use crate::layout::{sum_of_squares, Ownership, Unit};
use crate::step_header::Agreement;
use crate::Result;

/// A piece: its trainable parameter, the elements of it the piece holds, their values (what
/// `LocalShard::pieces` lists).
pub(super) type PieceValues = (usize, Range<usize>, Vec<f32>);

/// This rank's pieces of the trainable parameters.
pub(super) struct Pieces {
    ownership: Arc<Ownership>,
    /// This rank's place in its shard group.
    rank: usize,
    /// The piece of each trainable parameter in the shard (`None`: this rank owns none of it).
    piece_of: Arc<Vec<Option<usize>>>,
    /// Each piece's trainable parameter and its elements there, in shard order.
    piece_params: Vec<(usize, Range<usize>)>,
    /// Always `Some` between calls; shared with the blocks, which read their pieces.
    shard: SharedShard,
}

impl Pieces {
    /// The pieces of `units` (the root's, then the blocks') that shard-group rank `rank` owns,
    /// with their values taken from `whole[p]` (this rank's elements of trainable parameter
    /// `p`), on `device` with autodiff as the model's parameters are. A piece's [`ParamId`] is
    /// its parameter's position among the float tensors (`float_position`) plus one.
    pub(super) fn new<'a>(
        units: impl Iterator<Item = &'a Unit>,
        ownership: Arc<Ownership>,
        rank: usize,
        mut owned: Vec<Vec<f32>>,
        float_position: &[usize],
        device: &Device,
    ) -> Pieces {
        let mut piece_of = vec![None; owned.len()];
        let mut values = Vec::new();
        let mut piece_params = Vec::new();
        for unit in units {
            for slot in unit.slots(&ownership, rank) {
                piece_of[slot.param] = Some(values.len());
                let value = std::mem::take(&mut owned[slot.param]);
                values.push((ParamId::from(float_position[slot.param] as u64 + 1), value));
                piece_params.push((slot.param, slot.in_param));
            }
        }
        let shard = ShardParams::new(values, &device.clone().autodiff());
        Pieces {
            ownership,
            rank,
            piece_of: Arc::new(piece_of),
            piece_params,
            shard: Arc::new(Mutex::new(Some(shard))),
        }
    }

    /// Who owns which elements.
    pub(super) fn ownership(&self) -> &Arc<Ownership> {
        &self.ownership
    }

    /// The shard, shared with the blocks.
    pub(super) fn shared(&self) -> &SharedShard {
        &self.shard
    }

    /// The piece index, shared with the blocks.
    pub(super) fn piece_of(&self) -> &Arc<Vec<Option<usize>>> {
        &self.piece_of
    }

    /// Each piece's trainable parameter and its elements there.
    pub(super) fn piece_params(&self) -> &[(usize, Range<usize>)] {
        &self.piece_params
    }

    /// A copy of the shard (its tensors are shared, not copied).
    pub(super) fn shard(&self) -> ShardParams {
        self.shard
            .lock()
            .expect("not poisoned")
            .clone()
            .expect("shard is present between calls")
    }

    /// Takes the shard out for a step; [`put`](Self::put) brings it back.
    pub(super) fn take(&self) -> Option<ShardParams> {
        self.shard.lock().expect("not poisoned").take()
    }

    /// Brings the shard back after [`take`](Self::take).
    pub(super) fn put(&self, shard: Option<ShardParams>) {
        *self.shard.lock().expect("not poisoned") = shard;
    }

    /// Every piece with its parameter, its elements and its values.
    pub(super) fn values(&self) -> Result<Vec<PieceValues>> {
        let shard = self.shard();
        self.piece_params
            .iter()
            .enumerate()
            .map(|(i, (p, range))| Ok((*p, range.clone(), shard.value(i)?)))
            .collect()
    }

    /// This rank's block of `unit`: the values of its pieces there, in slot order.
    pub(super) fn own_values(&self, unit: &Unit, shard: &ShardParams) -> Result<Vec<f32>> {
        let mut own = Vec::with_capacity(unit.block(self.rank).len());
        for slot in unit.slots(&self.ownership, self.rank) {
            own.extend(shard.value(self.piece(slot.param))?);
        }
        Ok(own)
    }

    /// The gradients of `own` (this rank's block of `unit`'s averaged gradients) piece by
    /// piece, for the pieces whose parameter some rank used.
    pub(super) fn gradients(
        &self,
        unit: &Unit,
        own: &[f32],
        agreed: &Agreement,
    ) -> Vec<(usize, Vec<f32>)> {
        let start = unit.block(self.rank).start;
        unit.slots(&self.ownership, self.rank)
            .filter(|slot| agreed.is_used(slot.param))
            .map(|slot| {
                let grad = own[slot.in_unit.start - start..slot.in_unit.end - start].to_vec();
                (self.piece(slot.param), grad)
            })
            .collect()
    }

    /// Steps the pieces of `unit` whose parameter some rank used, with `own` (this rank's
    /// block of the unit's averaged gradients).
    pub(super) fn step_unit(
        &self,
        unit: &Unit,
        shard: ShardParams,
        own: &[f32],
        agreed: &Agreement,
        step: &mut dyn FnMut(ShardParams, GradientsParams) -> ShardParams,
    ) -> ShardParams {
        let grads = self.gradients(unit, own, agreed);
        if grads.is_empty() {
            return shard;
        }
        let mut params = GradientsParams::new();
        for (piece, grad) in grads {
            shard.register_grad(piece, grad, &mut params);
        }
        let _s = phalanx_core::trace::span("step", "optimizer");
        step(shard, params)
    }

    /// Σ g² of each parameter's elements in `own` (this rank's block of `unit`'s gradients),
    /// into `partial[p]` (Note [Global norm]).
    pub(super) fn sums_of_squares(&self, unit: &Unit, own: &[f32], partial: &mut [f64]) {
        let start = unit.block(self.rank).start;
        for slot in unit.slots(&self.ownership, self.rank) {
            let values = &own[slot.in_unit.start - start..slot.in_unit.end - start];
            partial[slot.param] = sum_of_squares(values);
        }
    }

    fn piece(&self, p: usize) -> usize {
        self.piece_of[p].expect("a slot of this rank is one of its pieces")
    }
}
