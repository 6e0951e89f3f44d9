//! The data-parallel training step: the seed recipe's loop body under DDP.

use phalanx_core::trace;
use phalanx_ddp::DistributedDataParallel;

use crate::{forward_backward, Classifier, Optim, Result};

/// One data-parallel training step: forward, backward, gradients averaged over ranks, update.
/// Each bucket's parameters are updated as soon as that bucket is averaged, while later buckets
/// are still on the wire ([`DistributedDataParallel::sync_and_step`]). Returns this rank's loss.
/// A collective: every rank must call it once per step.
pub fn train_step<M: Classifier>(
    ddp: &mut DistributedDataParallel<M>,
    optimizer: &mut Optim,
    features: &[f32],
    labels: &[i64],
) -> Result<f32> {
    let (grads, loss) = traced_forward_backward(ddp, features, labels)?;
    ddp.sync_and_step(grads, |m, g| optimizer.step(m, g))?;
    Ok(loss)
}

/// [`train_step`] without the fusion: every bucket is averaged before the optimizer touches
/// any parameter, so a step whose collectives fail leaves the model and the optimizer state
/// as they were (what fault tolerance needs, Note [A regroup]). Bitwise the same result.
pub fn train_step_unfused<M: Classifier>(
    ddp: &mut DistributedDataParallel<M>,
    optimizer: &mut Optim,
    features: &[f32],
    labels: &[i64],
) -> Result<f32> {
    let (grads, loss) = traced_forward_backward(ddp, features, labels)?;
    let grads = ddp.sync_gradients(grads)?;
    ddp.map_module(|m| optimizer.step(m, grads));
    Ok(loss)
}

/// A gradient-accumulation step inside `no_sync`: forward and backward, gradients kept locally
/// until the next [`train_step`], no update. Returns the loss.
pub fn accumulate_step<M: Classifier>(
    ddp: &mut DistributedDataParallel<M>,
    features: &[f32],
    labels: &[i64],
) -> Result<f32> {
    let (grads, loss) = forward_backward(ddp.module(), features, labels)?;
    ddp.no_sync(grads)?;
    Ok(loss)
}

/// [`train_step`] with the averaged gradients clipped to the global L2 norm `max_norm` (PyTorch's
/// `clip_grad_norm_`): the norm spans every bucket, so the update waits for all of them
/// ([`DistributedDataParallel::sync_gradients_clipped`]). Returns this rank's loss and the norm
/// before clipping (the same on every rank).
pub fn train_step_clipped<M: Classifier>(
    ddp: &mut DistributedDataParallel<M>,
    optimizer: &mut Optim,
    features: &[f32],
    labels: &[i64],
    max_norm: f32,
) -> Result<(f32, f32)> {
    let (grads, loss) = traced_forward_backward(ddp, features, labels)?;
    let (grads, norm) = ddp.sync_gradients_clipped(grads, max_norm)?;
    ddp.map_module(|m| optimizer.step(m, grads));
    Ok((loss, norm))
}

/// [`forward_backward`] of the wrapped model under a `forward+backward` trace span.
fn traced_forward_backward<M: Classifier>(
    ddp: &DistributedDataParallel<M>,
    features: &[f32],
    labels: &[i64],
) -> Result<(phalanx_ddp::adapter::burn::Gradients, f32)> {
    let _compute = trace::span("forward+backward", "compute");
    forward_backward(ddp.module(), features, labels)
}
