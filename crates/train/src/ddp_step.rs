//! The data-parallel training step: the seed recipe's loop body under DDP.

use phalanx_core::trace;
use phalanx_ddp::DistributedDataParallel;

use crate::{forward_backward, Mlp, Result, Sgd};

/// One data-parallel training step: forward, backward, gradients averaged over ranks, SGD update.
/// Each bucket's parameters are updated as soon as that bucket is averaged, while later buckets
/// are still on the wire ([`DistributedDataParallel::sync_and_step`]). Returns this rank's loss.
/// A collective: every rank must call it once per step.
pub fn train_step(
    ddp: &mut DistributedDataParallel<Mlp>,
    optimizer: &mut Sgd,
    features: &[f32],
    labels: &[i64],
) -> Result<f32> {
    let compute = trace::span("forward+backward", "compute");
    let (grads, loss) = forward_backward(ddp.module(), features, labels)?;
    drop(compute);
    ddp.sync_and_step(grads, |m, g| optimizer.step(m, g))?;
    Ok(loss)
}

/// A gradient-accumulation step inside `no_sync`: forward and backward, gradients kept locally
/// until the next [`train_step`], no update. Returns the loss.
pub fn accumulate_step(
    ddp: &mut DistributedDataParallel<Mlp>,
    features: &[f32],
    labels: &[i64],
) -> Result<f32> {
    let (grads, loss) = forward_backward(ddp.module(), features, labels)?;
    ddp.no_sync(grads)?;
    Ok(loss)
}
