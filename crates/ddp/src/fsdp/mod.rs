//! Sharded data parallelism: [`FullyShardedDataParallel`] keeps each rank's shard of the
//! optimizer state (ZeRO-1), of the gradients too (ZeRO-2, FSDP's `SHARD_GRAD_OP`) or of
//! the parameters as well (ZeRO-3, FSDP's `FULL_SHARD`), as [`Sharding`] says, and steps it
//! with Burn's own optimizers. Which rank owns which elements: Note [Shard layout] in
//! `layout.rs`; the step: Note [Sharded step] in `fully_sharded/mod.rs`. See `docs/sharding.md`.
//!
//! ```
//! use std::sync::Arc;
//! use burn::module::Module;
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::AdamConfig;
//! use burn::tensor::{Device, Distribution, Tensor};
//! use phalanx_ddp::adapter::burn::params_to_flat;
//! use phalanx_ddp::fsdp::{FsdpOptions, FullyShardedDataParallel, Sharding};
//!
//! #[derive(Module, Debug)]
//! struct Net { fc: Linear }
//!
//! let params = phalanx_testing::spawn_ranks(2, |pg| {
//!     let device = Device::flex().autodiff();
//!     let net = Net { fc: LinearConfig::new(4, 2).init(&device) };
//!     let options = FsdpOptions::new(Sharding::Full);
//!     let mut fsdp = FullyShardedDataParallel::new(net, Arc::new(pg), options).unwrap();
//!     let mut optim = AdamConfig::new().init(); // its state: this rank's half of the elements
//!     fsdp.unshard().unwrap(); // gathers the parameters for the forward pass
//!     let x = Tensor::<2>::random([8, 4], Distribution::Default, &device);
//!     let grads = fsdp.module().fc.forward(x).powf_scalar(2.0).mean().backward();
//!     fsdp.sync_and_step(grads, |shard, g| optim.step(1e-3, shard, g)).unwrap();
//!     params_to_flat(&fsdp.into_inner().unwrap()).unwrap()
//! });
//! assert_eq!(params[0], params[1]);
//! ```

mod collectives;
mod fully_shard;
mod fully_sharded;
mod options;
mod unit;

pub use crate::adapter::shard::ShardParams;
pub use fully_shard::{seed_step, FullyShard};
pub use fully_sharded::{FullyShardedDataParallel, LocalShard, PendingStep};
pub use options::{FsdpOptions, Sharding};
