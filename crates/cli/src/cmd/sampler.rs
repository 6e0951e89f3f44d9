//! `phalanx sampler`: which samples does rank r see in epoch e? Prints exactly what PyTorch's
//! `DistributedSampler` would yield, so a job's data order can be checked against PyTorch.
use std::io::Write;
use std::process::ExitCode;

use phalanx_data::{exact_shard, DistributedSampler};

/// Print one rank's sample indices for one epoch, comma-separated on one line: exactly
/// `list(DistributedSampler(dataset_of_len_N, R, r, shuffle, seed, drop_last))` after
/// `set_epoch(E)` in PyTorch.
///
/// Example: `phalanx sampler --len 10 --replicas 4 --rank 1` prints `1,9,2`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Number of samples in the dataset.
    #[arg(long, value_name = "N")]
    len: usize,
    /// Number of replicas (the world size).
    #[arg(long, value_name = "R", env = "WORLD_SIZE")]
    replicas: usize,
    /// The rank, in 0..R.
    #[arg(long, value_name = "r", env = "RANK")]
    rank: usize,
    /// Shuffle seed, shared by all ranks (PyTorch's default 0).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Epoch (PyTorch's `set_epoch`); the permutation is seeded with seed + epoch.
    #[arg(long, default_value_t = 0)]
    epoch: u64,
    /// Drop the tail so every rank gets floor(N/R) samples, instead of padding to ceil(N/R).
    #[arg(long)]
    drop_last: bool,
    /// Keep the dataset order (0..N) instead of a random permutation.
    #[arg(long)]
    no_shuffle: bool,
    /// Print the rank's exact-evaluation shard instead (contiguous, no padding, no shuffle):
    /// `start..end` of 0..N.
    #[arg(long, conflicts_with_all = ["seed", "epoch", "drop_last", "no_shuffle"])]
    exact: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    if args.exact {
        let shard = exact_shard(args.len, args.replicas, args.rank)?;
        writeln!(out, "{}..{}", shard.start, shard.end)?;
        return Ok(ExitCode::SUCCESS);
    }
    let sampler = DistributedSampler::new(args.len, args.replicas, args.rank)?
        .with_seed(args.seed)
        .with_shuffle(!args.no_shuffle)
        .with_drop_last(args.drop_last)?;
    let indices = sampler.indices(args.epoch);
    let mut line = String::with_capacity(indices.len() * 6);
    for (k, i) in indices.iter().enumerate() {
        if k > 0 {
            line.push(',');
        }
        line.push_str(&i.to_string());
    }
    writeln!(out, "{line}")?;
    Ok(ExitCode::SUCCESS)
}
