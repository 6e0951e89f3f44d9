//! What a training run is asked to do ([`TrainConfig`]) and who hears how it goes
//! ([`Reporter`]): the inputs of [`train`](crate::train), which its checkpoints also record.

use std::path::PathBuf;

use phalanx_checkpoint::position::Position;
use phalanx_checkpoint::{Damaged, Meta};
use phalanx_ddp::outer::OuterOptions;
use phalanx_ddp::{fsdp::Sharding, BucketMemory};

use crate::{metrics::EpochRecord, pipeline::PipelineOptions, ModelKind, OptimOptions};

/// Everything `phalanx train` needs to know.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// Dataset spec (`digits`, `mnist5k`, `synthetic[:N[:SEED]]`, `csv:PATH`, `mnist-idx:DIR`;
    /// for `--model gpt` a text corpus: `shakespeare` or `text:PATH`).
    pub dataset: String,
    /// Share of the data held out for testing.
    pub test_fraction: f64,
    /// Epochs to train.
    pub epochs: u64,
    /// Samples per step on each rank.
    pub batch_size: usize,
    /// Which model (`--model`).
    pub model: ModelKind,
    /// The optimizer, its hyper-parameters and learning-rate schedule.
    pub optim: OptimOptions,
    /// Clip the averaged gradients to this global L2 norm (PyTorch's `clip_grad_norm_`).
    pub grad_clip: Option<f32>,
    /// Freeze the parameters whose path matches (comma-separated globs or path prefixes).
    pub freeze: Option<String>,
    /// Hidden width (MLP); d_model (GPT).
    pub hidden: usize,
    /// Hidden layers (MLP); blocks (GPT).
    pub depth: usize,
    /// Attention heads per block (GPT).
    pub heads: usize,
    /// Tokens a window feeds the model (GPT; a sample is `seq_len + 1` tokens).
    pub seq_len: usize,
    /// Dropout probability (GPT).
    pub dropout: f64,
    /// Tensor-parallel size (`--tp`, GPT; 1: none): Note [Tensor-parallel run].
    pub tp: usize,
    /// Split the activations between the tensor-parallel regions along the sequence
    /// (`--sequence-parallel`, GPT under `--tp`): Note [Sequence parallelism in the GPT].
    pub sequence_parallel: bool,
    /// Pipeline parallelism (`--pp` and its options, GPT): Note [Pipeline run].
    pub pp: PipelineOptions,
    /// Seed of the model init, the split and the sampler.
    pub seed: u64,
    /// Reduce gradients in bf16 (halves bytes on the wire).
    pub bf16: bool,
    /// Where gradient buckets live (`Auto`: on the GPU under NCCL, on the host otherwise).
    pub bucket_memory: BucketMemory,
    /// What each rank keeps whole and what only its shard of (`--sharding`).
    pub sharding: Sharding,
    /// Under `--sharding full`: whether each block frees its gathered parameters after its
    /// forward (and recomputes it in backward), FSDP2's `reshard_after_forward`.
    pub reshard_after_forward: bool,
    /// Under `--sharding hybrid`: the ranks of each shard group (default: one host's).
    pub shard_group_size: Option<usize>,
    /// Where checkpoints go (rank 0 writes).
    pub checkpoint_dir: Option<PathBuf>,
    /// Also checkpoint every N steps (0 = only at epoch ends).
    pub checkpoint_every: u64,
    /// Continue from the newest checkpoint in `checkpoint_dir`.
    pub resume: bool,
    /// Stop after this many steps in total (benchmarks, tests); `None` = all epochs.
    pub max_steps: Option<u64>,
    /// Train in islands that meet every few steps (`--outer`, `--sync-every`, ...): Note
    /// [Outer sync] in phalanx-ddp, Note [Islands run] in `trainer/`; `None`: every step syncs.
    pub outer: Option<OuterOptions>,
}

/// Events the caller renders (progress lines, JSON).
pub trait Reporter {
    /// A step finished on this rank.
    fn step(&mut self, _epoch: u64, _step: u64, _steps: u64, _loss: f32) {}
    /// An epoch finished (called on every rank with the reduced figures).
    fn epoch(&mut self, _record: &EpochRecord) {}
    /// A checkpoint was committed (rank 0).
    fn checkpoint(&mut self, _path: &std::path::Path) {}
    /// Training resumed from a checkpoint.
    fn resumed(&mut self, _meta: &Meta) {}
    /// `--resume` skipped a damaged checkpoint newer than the one it resumes from (rank 0).
    fn checkpoint_skipped(&mut self, damaged: &Damaged) {
        tracing::warn!("skipping a damaged checkpoint: {}", damaged.error);
    }
    /// Fault tolerance: after a rank died, this rank's group was re-formed with a replacement
    /// and the first step after it completed (Note [A regroup]).
    fn regrouped(&mut self, r: &Regrouped) {
        tracing::warn!(
            "generation {}: regrouped, continuing at step {} from rank {}'s state, {:.2} s after the failure",
            r.generation,
            r.position.global_step,
            r.source,
            r.seconds
        );
    }
    /// `--resume` found no checkpoint in `dir`: training starts from the beginning (rank 0).
    fn nothing_to_resume(&mut self, dir: &std::path::Path) {
        tracing::warn!(
            "--resume: no checkpoint in {}; starting from the beginning",
            dir.display()
        );
    }
}

/// What a regroup under fault tolerance did (Note [A regroup] in `trainer/regroup/replicas.rs`),
/// for the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Regrouped {
    /// The process group's new generation.
    pub generation: u64,
    /// The slots of the new group, ascending (its ranks in order).
    pub members: Vec<usize>,
    /// The rank (of the new group) whose state every rank took.
    pub source: usize,
    /// Where the run continues.
    pub position: Position,
    /// From the failure (for a replacement: from its start of training) to the first step
    /// completed after it.
    pub seconds: f64,
    /// Whether this rank is the replacement (it took the state; it held none).
    pub replacement: bool,
}
