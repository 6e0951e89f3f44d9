//! phalanx-train: the models and the training loop of `phalanx train` (MLP, CNN, transformer;
//! SGD, Adam, AdamW with schedules), and a trainer for any Burn classifier ([`Classifier`]), on
//! Burn and phalanx DDP.
#![warn(missing_docs, unreachable_pub)]

mod config;
mod ddp_step;
mod device;
mod device_cuda;
mod error;
mod init;
pub mod metrics;
mod model;
mod model_parallel;
mod optim;
mod parallel;
pub mod pipeline;
mod snapshot;
mod step;
pub mod stop;
mod tensor_parallel;
pub use tensor_parallel::{check_model as check_tensor_parallel_model, check_sequence_parallel};
pub mod throughput;
pub mod trainer;

pub use config::{Regrouped, Reporter, TrainConfig};
pub use ddp_step::{accumulate_step, train_step, train_step_clipped, train_step_unfused};
pub use device::{cuda_device_count, device, set_device, DeviceSpec};
pub use error::{Error, Result};
pub use model::{
    freeze_matching, with_deferred_init, with_model, with_stable_ids, Block, CausalSelfAttention,
    Classifier, Cnn, Encoder, FeedForward, Gpt, GptConfig, Mlp, MlpConfig, ModelKind, ModelSpec,
    PipelineCosts, StageOutput, Transformer, WithModel,
};
pub use optim::{LrSchedule, Optim, OptimOptions, OptimizerKind, ScheduleKind};
pub use phalanx_ddp::outer::{OuterDType, OuterMode, OuterOptions};
pub use phalanx_ddp::{fsdp::Sharding, on_compute_pool, threads_per_rank, BucketMemory};
pub use pipeline::{PipelineOptions, PipelineSchedule, PipelineStage, WholeOf};
pub use step::{evaluate, forward_backward, param_digest, score, train_step_local, Score};
pub use trainer::{train, train_fault_tolerant, train_model, Summary};
