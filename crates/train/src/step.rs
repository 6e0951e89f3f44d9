//! One training step, evaluation and the parameter digest.

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Gradients, Int, Tensor, TensorData};
use phalanx_ddp::adapter::burn::params_to_flat;
use sha2::{Digest, Sha256};

use crate::{Classifier, Error, Optim, Result};

/// Forward and backward of one batch: the gradients and the mean cross-entropy loss.
///
/// `features` is row-major `[labels.len(), input]`; labels are class indices.
pub fn forward_backward<M: Classifier>(
    model: &M,
    features: &[f32],
    labels: &[i64],
) -> Result<(Gradients, f32)> {
    let device = model.device();
    let x = batch_tensor(model, features, labels.len())?;
    let y = Tensor::<1, Int>::from_data(TensorData::new(labels.to_vec(), [labels.len()]), &device);
    let targets = model.targets(x.clone(), y);
    let logits = model.logits(x);
    let loss = model.loss(logits, targets)?;
    let value = loss.clone().into_scalar::<f32>();
    Ok((loss.backward(), value))
}

/// One single-process training step (no process group): forward, backward, optimizer update.
pub fn train_step_local<M: Classifier>(
    model: M,
    optimizer: &mut Optim,
    features: &[f32],
    labels: &[i64],
) -> Result<(M, f32)> {
    let (grads, loss) = forward_backward(&model, features, labels)?;
    let grads = GradientsParams::from_grads(grads, &model);
    Ok((optimizer.step(model, grads), loss))
}

/// What a model scores on held-out rows: its targets ([`Classifier::targets`]: one per
/// sample, or one per position of a language model's windows), how many of them its arg-max
/// logit predicts, and the sum of their cross-entropy losses.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Score {
    /// Targets scored.
    pub targets: usize,
    /// Targets whose arg-max logit is the target.
    pub correct: usize,
    /// Sum of the targets' cross-entropy (natural log).
    pub loss_sum: f64,
}

/// Number of targets of `features` (one per row for a classifier) whose arg-max logit is the
/// target: [`score`]'s `correct`.
pub fn evaluate<M: Classifier>(model: &M, features: &[f32], labels: &[i64]) -> Result<usize> {
    Ok(score(model, features, labels)?.correct)
}

/// The model's [`Score`] on `features` and `labels`, in chunks of rows to bound memory.
pub fn score<M: Classifier>(model: &M, features: &[f32], labels: &[i64]) -> Result<Score> {
    let model = model.valid();
    let input = model.input_dim();
    if features.len() != labels.len() * input {
        return Err(Error::BatchShape {
            features: features.len(),
            labels: labels.len(),
            input,
        });
    }
    let device = model.device();
    let mut score = Score::default();
    let chunk = model.eval_rows().max(1);
    for (rows, labels) in features.chunks(chunk * input).zip(labels.chunks(chunk)) {
        let x = batch_tensor(&model, rows, labels.len())?;
        let y =
            Tensor::<1, Int>::from_data(TensorData::new(labels.to_vec(), [labels.len()]), &device);
        let targets = model.targets(x.clone(), y);
        let s = score_logits(&model, model.logits(x), targets)?;
        score.targets += s.targets;
        score.correct += s.correct;
        score.loss_sum += s.loss_sum;
    }
    Ok(score)
}

/// The [`Score`] of `logits` against `targets`.
pub(crate) fn score_logits<M: Classifier>(
    model: &M,
    logits: Tensor<2>,
    targets: Tensor<1, Int>,
) -> Result<Score> {
    let count = targets.dims()[0];
    let mean = model
        .loss(logits.clone(), targets.clone())?
        .into_scalar::<f32>();
    let hits = model
        .predictions(logits)?
        .equal(targets)
        .int()
        .sum()
        .into_scalar::<i64>();
    Ok(Score {
        targets: count,
        correct: hits as usize,
        loss_sum: mean as f64 * count as f64,
    })
}

/// SHA-256 (hex) of all parameters in canonical order, as little-endian `f32` bytes: equal digests
/// mean bitwise identical models.
pub fn param_digest<M: Module>(model: &M) -> Result<String> {
    Ok(digest_of(&params_to_flat(model)?))
}

/// [`param_digest`] of float tensors' values in canonical order.
pub(crate) fn digest_of(values: &[Vec<f32>]) -> String {
    let mut hasher = ParamHasher::default();
    for param in values {
        hasher.update(param);
    }
    hasher.finish()
}

/// [`param_digest`] fed one tensor at a time (a sharded model gathered block by block).
#[derive(Default)]
pub(crate) struct ParamHasher(Sha256);

impl ParamHasher {
    /// Adds a tensor's values, as little-endian `f32` bytes.
    pub(crate) fn update(&mut self, values: &[f32]) {
        let mut bytes = Vec::with_capacity(4 * values.len().min(1 << 16));
        for chunk in values.chunks(1 << 16) {
            bytes.clear();
            bytes.extend(chunk.iter().flat_map(|v| v.to_le_bytes()));
            self.0.update(&bytes);
        }
    }

    /// The digest (hex).
    pub(crate) fn finish(self) -> String {
        phalanx_core::hex::encode(&self.0.finalize())
    }
}

/// Rows `[rows, input_dim]` of flat features as a tensor on the model's device.
pub(crate) fn batch_tensor<M: Classifier>(
    model: &M,
    features: &[f32],
    rows: usize,
) -> Result<Tensor<2>> {
    let input = model.input_dim();
    if features.len() != rows * input || rows == 0 {
        return Err(Error::BatchShape {
            features: features.len(),
            labels: rows,
            input,
        });
    }
    Ok(Tensor::from_data(
        TensorData::new(features.to_vec(), [rows, input]),
        &model.device(),
    ))
}
