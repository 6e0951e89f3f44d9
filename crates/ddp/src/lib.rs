//! phalanx-ddp: `DistributedDataParallel` for Burn models, PyTorch's DDP semantics.
//!
//! Each rank holds a replica of the model; construction checks that every rank built the same
//! parameters and broadcasts rank 0's values; after each backward, gradients are packed into
//! buckets, averaged across ranks bucket by bucket while the next bucket is packed, and handed to
//! the optimizer. The replicas stay bitwise identical. With the `cuda` and `nccl` features, a
//! model on a CUDA GPU under the nccl backend keeps its buckets on the GPU
//! ([`BucketMemory`]). See `docs/ddp.md`.
//!
//! ```
//! use std::sync::Arc;
//! use burn::module::Module;
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::SgdConfig;
//! use burn::tensor::{Device, Distribution, Tensor};
//! use phalanx_ddp::{adapter::burn::params_to_flat, DdpOptions, DistributedDataParallel};
//!
//! #[derive(Module, Debug)]
//! struct Net { fc: Linear }
//!
//! // Two ranks as threads; in a real job, `phalanx_pg::init_process_group()` in each process.
//! let params = phalanx_testing::spawn_ranks(2, |pg| {
//!     let device = Device::flex().autodiff();
//!     let net = Net { fc: LinearConfig::new(4, 2).init(&device) }; // differs per rank…
//!     let mut ddp = DistributedDataParallel::new(net, Arc::new(pg), DdpOptions::default()).unwrap();
//!     let mut optim = SgdConfig::new().init();
//!     // …each rank trains on its own data…
//!     let x = Tensor::<2>::random([8, 4], Distribution::Default, &device);
//!     let grads = ddp.module().fc.forward(x).powf_scalar(2.0).mean().backward();
//!     let grads = ddp.sync_gradients(grads).unwrap();
//!     ddp.map_module(|m| optim.step(0.1, m, grads));
//!     params_to_flat(ddp.module()).unwrap()
//! });
//! assert_eq!(params[0], params[1]); // …and the replicas are identical.
//! ```
#![warn(missing_docs, unreachable_pub)]

pub mod adapter;
pub mod bucket;
mod buffers;
mod compute_pool;
mod data_parallel;
mod ddp;
mod error;
pub mod fsdp;
pub mod hook;
pub mod layout;
mod model_norm;
mod options;
pub mod outer;
mod reducer;
mod stats;
mod step_core;
mod step_header;
mod verify;

pub use compute_pool::{on_compute_pool, ranks_have_cores, threads_per_rank};
pub use data_parallel::{DataParallel, HeldFloats, Local, ShardView, StepKind};
pub use ddp::DistributedDataParallel;
pub use error::{Error, Result};
pub use hook::{
    AllreduceHook, Bf16CompressHook, BucketBuffer, BucketWork, CommHook, GradBucket, LentGradient,
};
pub use model_norm::ModelNorm;
pub use options::{BucketMemory, BufferSync, DdpOptions};
pub use stats::CommStats;
