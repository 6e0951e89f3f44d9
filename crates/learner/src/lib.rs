//! burn-train's `Learner` across processes and hosts.
//!
//! A Burn program that trains with burn-train's `SupervisedTraining` (metrics, the terminal
//! dashboard, checkpoints, early stopping, gradient accumulation) changes one line, the
//! strategy, and runs unchanged on one process or on every process of a job started by
//! `phalanx launch`, torchrun, mpirun or Slurm:
//!
//! ```no_run
//! # use burn::tensor::Device;
//! # fn doc() -> Result<(), phalanx_learner::Error> {
//! let device = Device::flex();
//! let strategy = phalanx_learner::Distributed::new(device)?;
//! // SupervisedTraining::new(artifact_dir, train_loader, valid_loader)
//! //     .metrics((AccuracyMetric::new(), LossMetric::new()))
//! //     .with_training_strategy(strategy.into())          // <- the one line
//! //     .launch(learner);
//! # let _ = strategy; Ok(()) }
//! ```
//!
//! [`Distributed`] wraps the model in phalanx's `DistributedDataParallel`, gives each rank its
//! share of every epoch (Note [Batch striding]), validates over the whole validation set (Note
//! [Validation on rank 0]), renders and checkpoints on rank 0, and makes every rank stop after
//! the same epoch (Note [Epoch agreement]). `crates/learner/examples/mnist_learner.rs` is a
//! whole program; docs/learner.md says what of the Learner is supported and what is not.

#![warn(missing_docs, unreachable_pub)]

mod agree;
mod checkpointer;
mod error;
mod grads;
mod resume;
mod share;
mod strategy;
mod zero;

pub use checkpointer::CrashSafeCheckpointer;
pub use error::{Error, Result};
pub use resume::newest_checkpoint;
pub use strategy::{Distributed, DEFAULT_REPORT};
