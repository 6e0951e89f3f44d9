//! phalanx-train: the seed recipe's model and training step, on Burn and phalanx DDP.
#![warn(missing_docs, unreachable_pub)]

pub mod checkpoint;
mod ddp_step;
mod device;
mod device_cuda;
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
pub use device::{cuda_device_count, device, set_device, DeviceSpec};
pub use error::{Error, Result};
pub use model::{Mlp, MlpConfig};
pub use optim::{Sgd, SgdOptions};
pub use phalanx_ddp::BucketMemory;
pub use step::{evaluate, forward_backward, param_digest, train_step_local};
pub use trainer::{train, Reporter, Summary, TrainConfig};
