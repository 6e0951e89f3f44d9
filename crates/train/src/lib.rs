//! phalanx-train: the seed recipe's model and training step, on Burn and phalanx DDP.
#![warn(missing_docs, unreachable_pub)]

pub mod checkpoint;
mod ddp_step;
mod error;
mod init;
pub mod metrics;
mod model;
mod optim;
pub mod position;
mod snapshot;
mod step;
pub mod throughput;
pub mod trainer;

pub use ddp_step::{accumulate_step, train_step};
pub use error::{Error, Result};
pub use model::{Mlp, MlpConfig};
pub use optim::{Sgd, SgdOptions};
pub use step::{evaluate, forward_backward, param_digest, train_step_local};
pub use trainer::{train, Reporter, Summary, TrainConfig};

/// The training device: Burn's `flex` CPU backend with autodiff.
pub fn device() -> burn::tensor::Device {
    burn::tensor::Device::flex().autodiff()
}
