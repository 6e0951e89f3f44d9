//! phalanx-examples (not published): the tutorials, run as examples of this crate.
//!
//! - `examples/own_model.rs`: your own Burn model with BatchNorm, your own loop,
//!   `DistributedSampler`, `DistributedDataParallel`, Adam and a crash-safe checkpoint that the
//!   next run resumes from at any world size;
//! - `examples/sharded_model.rs`: your own Burn model fully sharded (ZeRO-3, FSDP2's
//!   `fully_shard`);
//! - `examples/tensor_parallel.rs`: your own Burn model split across ranks by tensor
//!   parallelism (`ColwiseParallel`, `RowwiseParallel`) on a mesh, data parallel over the rest.
//! - `examples/pipeline.rs`: your own Burn model cut into pipeline stages (phalanx-train's
//!   `PipelineStage` and its 1F1B schedule) in a loop of your own, data parallel over the rest.
//!
//! ```sh
//! cargo build --release -p phalanx-examples --example own_model
//! phalanx launch --nproc-per-node 2 -- target/release/examples/own_model --epochs 3
//! ```
//!
//! The library holds only the tutorials' toy data ([`teacher_batch`], [`teacher_rows`]): the tutorials depend on
//! the engines, the sampler and the checkpoints as a user's program does, and being a crate of
//! their own keeps every library crate's dependencies pointing down (docs/architecture.md).

use burn::tensor::{Device, Int, Tensor, TensorData};

/// Batch `step` of data-parallel rank `rank`: 64 points of 32 features, which a fixed teacher
/// labels with one of 4 classes (the signs of the first two features). The same on every
/// process for the same `step` and `rank`.
pub fn teacher_batch(step: usize, rank: usize, device: &Device) -> (Tensor<2>, Tensor<1, Int>) {
    let (x, y) = teacher_rows(step, rank);
    let rows = y.len();
    (
        Tensor::from_data(TensorData::new(x, [rows, 32]), device),
        Tensor::from_data(TensorData::new(y, [rows]), device),
    )
}

/// [`teacher_batch`] as flat rows: the features `[64 × 32]` and the labels `[64]`, the form
/// phalanx-train's steps take.
pub fn teacher_rows(step: usize, rank: usize) -> (Vec<f32>, Vec<i64>) {
    let rows = 64;
    let x: Vec<f32> = (0..rows * 32)
        .map(|i| (((step * 7919 + rank * 104_729 + i * 31) % 1000) as f32) / 500.0 - 1.0)
        .collect();
    let y: Vec<i64> = x
        .chunks(32)
        .map(|r| (r[0] > 0.0) as i64 * 2 + (r[1] > 0.0) as i64)
        .collect();
    (x, y)
}
