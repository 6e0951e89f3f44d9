//! phalanx-examples (not published): the tutorials, run as examples of this crate.
//!
//! - `examples/own_model.rs`: your own Burn model with BatchNorm, your own loop,
//!   `DistributedSampler`, `DistributedDataParallel`, Adam and a crash-safe checkpoint that the
//!   next run resumes from at any world size;
//! - `examples/sharded_model.rs`: your own Burn model fully sharded (ZeRO-3, FSDP2's
//!   `fully_shard`).
//!
//! ```sh
//! cargo build --release -p phalanx-examples --example own_model
//! phalanx launch --nproc-per-node 2 -- target/release/examples/own_model --epochs 3
//! ```
//!
//! The library itself is empty: the tutorials depend on the engines, the sampler and the
//! checkpoints as a user's program does, and being a crate of their own keeps every library
//! crate's dependencies pointing down (docs/architecture.md).
