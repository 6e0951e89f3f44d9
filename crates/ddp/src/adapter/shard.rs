//! [`ShardParams`]: the elements of the trainable parameters that this rank owns (Note [Shard
//! layout] in `layout.rs`), as a Burn module, so that Burn's own optimizers (SGD with
//! momentum, Adam, AdamW, …) step a shard exactly as they step a whole model and keep their
//! state for it alone.
//!
//! One flat parameter per trainable parameter of which this rank owns some elements (its
//! *piece*), in the order the shard's units list them. A piece's [`ParamId`] is its
//! parameter's stable id (Note [Stable parameter ids] in phalanx-train: the position among
//! the model's float tensors, plus one), the same on every rank and at every world size, so
//! that optimizer state saved from a shard maps back onto its parameter, and DDP's state of
//! a model with stable ids is keyed as the shards' is.

use burn::module::{Module, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};

use crate::{Error, Result};

/// This rank's pieces of the trainable parameters, as a module Burn's optimizers step.
///
/// ```
/// use burn::module::ParamId;
/// use burn::optim::{GradientsParams, SgdConfig};
/// use burn::tensor::Device;
/// use phalanx_ddp::fsdp::ShardParams;
///
/// let device = Device::flex().autodiff();
/// let shard = ShardParams::new(vec![(ParamId::from(3), vec![1.0, 2.0])], &device);
/// let mut grads = GradientsParams::new();
/// shard.register_grad(0, vec![1.0, 1.0], &mut grads);
/// let shard = SgdConfig::new().init().step(0.5, shard, grads);
/// assert_eq!(shard.values().unwrap(), vec![vec![0.5, 1.5]]);
/// ```
#[derive(Module, Debug)]
pub struct ShardParams {
    pieces: Vec<Param<Tensor<1>>>,
}

impl ShardParams {
    /// Pieces with these ids and values, on `device`, an autodiff device as a model's
    /// parameters are (Burn's optimizers take only those).
    pub fn new(pieces: Vec<(ParamId, Vec<f32>)>, device: &Device) -> Self {
        let pieces = pieces
            .into_iter()
            .map(|(id, values)| {
                let len = values.len();
                let tensor = Tensor::<1>::from_data(TensorData::new(values, [len]), device);
                Param::initialized(id, tensor.set_require_grad(true))
            })
            .collect();
        ShardParams { pieces }
    }

    /// Number of pieces.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// Whether this rank owns nothing.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Elements over all pieces.
    pub fn numel(&self) -> usize {
        self.pieces.iter().map(|p| p.val().dims()[0]).sum()
    }

    /// The id of piece `i`.
    pub fn id(&self, i: usize) -> ParamId {
        self.pieces[i].id
    }

    /// Registers `grad` as piece `i`'s gradient for the optimizer.
    pub fn register_grad(&self, i: usize, grad: Vec<f32>, params: &mut GradientsParams) {
        let piece = &self.pieces[i];
        let tensor = piece.val();
        let len = grad.len();
        let data = TensorData::new(grad, [len]);
        let grad = Tensor::<1>::from_data(data, (&tensor.device(), tensor.dtype()));
        params.register::<1>(piece.id, grad);
    }

    /// The value of piece `i`, flat.
    pub fn value(&self, i: usize) -> Result<Vec<f32>> {
        let data = self.pieces[i]
            .val()
            .try_into_data_as::<f32>()
            .map_err(|e| Error::Tensor {
                name: format!("shard piece {}", self.pieces[i].id),
                reason: e.to_string(),
            })?;
        data.try_into_vec::<f32>().map_err(|e| Error::Tensor {
            name: format!("shard piece {}", self.pieces[i].id),
            reason: format!("{e:?}"),
        })
    }

    /// The same pieces (ids, devices) with other values, one per piece, each of its piece's
    /// length: the optimizer's state, keyed by id, stays theirs.
    pub fn with_values(&self, values: Vec<Vec<f32>>) -> Self {
        let pieces = self
            .pieces
            .iter()
            .zip(values)
            .map(|(piece, values)| {
                let len = values.len();
                let device = piece.val().device();
                let tensor = Tensor::<1>::from_data(TensorData::new(values, [len]), &device);
                Param::initialized(piece.id, tensor.set_require_grad(true))
            })
            .collect();
        ShardParams { pieces }
    }

    /// Every piece's value, in order.
    pub fn values(&self) -> Result<Vec<Vec<f32>>> {
        (0..self.len()).map(|i| self.value(i)).collect()
    }
}
