//! `phalanx checkpoint`: what a checkpoint directory holds, and one file from a sharded
//! checkpoint for PyTorch.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use phalanx_checkpoint as checkpoint;

/// Checkpoints of `phalanx train --checkpoint-dir` (written whole, or sharded by every rank
/// under `--sharding`).
#[derive(clap::Subcommand)]
pub(crate) enum Checkpoint {
    /// Join a checkpoint (sharded at any world size, or whole) into one safetensors file of
    /// the model's tensors in PyTorch's layout, which `torch.nn.Module.load_state_dict(
    /// safetensors.torch.load_file(OUT), strict=True)` takes for the same architecture.
    ///
    /// Example: `phalanx checkpoint consolidate ckpt/ --out model.safetensors`.
    Consolidate {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The checkpoint's step (default: the newest that verifies).
        #[arg(long)]
        step: Option<u64>,
        /// The file to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// List the committed checkpoints, newest first: step, epoch, world size, sharding, and
    /// whether each verifies (every shard's digest checked).
    List {
        /// The checkpoint directory.
        dir: PathBuf,
    },
}

pub(crate) fn run(c: Checkpoint) -> anyhow::Result<ExitCode> {
    match c {
        Checkpoint::Consolidate { dir, step, out } => {
            let ck = match step {
                Some(step) => {
                    let path = dir.join(format!("step-{step:012}.json"));
                    if !path.exists() {
                        bail!("{} holds no checkpoint of step {step}", dir.display());
                    }
                    checkpoint::load(&path)?
                }
                None => {
                    let newest = checkpoint::load_newest_intact(&dir)?;
                    for d in &newest.damaged {
                        eprintln!("phalanx: skipping a damaged checkpoint: {}", d.error);
                    }
                    newest
                        .checkpoint
                        .with_context(|| format!("{} holds no checkpoint", dir.display()))?
                }
            };
            let step = checkpoint::consolidate(&ck, &out)?;
            if !ck.meta.linear_only {
                // Note [PyTorch's layout] in phalanx-checkpoint.
                eprintln!(
                    "phalanx checkpoint consolidate: note: this checkpoint was written by an older \
                     phalanx, which transposed every 2-D tensor; an Embedding's table in {} is \
                     [dim, num_embeddings], not PyTorch's [num_embeddings, dim] (Linear weights \
                     are right): resume it and save once with this phalanx to fix it",
                    out.display()
                );
            }
            println!(
                "wrote {} ({} tensors, step {step}, from {})",
                out.display(),
                ck.tensors.len(),
                match &ck.meta.sharded {
                    Some(s) => format!("{} shards, --sharding {}", s.shards.len(), s.sharding),
                    None => "a whole checkpoint".to_string(),
                }
            );
        }
        Checkpoint::List { dir } => {
            for path in checkpoint::list(&dir)? {
                let status = match checkpoint::load(&path) {
                    Ok(ck) => format!(
                        "step {} epoch {} world {} {}",
                        ck.meta.global_step,
                        ck.meta.epoch,
                        ck.meta.world_size,
                        match &ck.meta.sharded {
                            Some(s) =>
                                format!("sharded ({}, {} shards)", s.sharding, s.shards.len()),
                            None => "whole".to_string(),
                        }
                    ),
                    Err(e) => format!("DAMAGED: {e}"),
                };
                println!("{}: {status}", path.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
