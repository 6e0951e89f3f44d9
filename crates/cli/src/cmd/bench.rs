//! `phalanx bench …`: benchmarks with nccl-tests style output.
use std::process::ExitCode;

use super::bench_allreduce;

/// Benchmarks.
#[derive(clap::Subcommand)]
pub(crate) enum Bench {
    /// Allreduce bus bandwidth and latency per message size (nccl-tests' table).
    Allreduce(bench_allreduce::Args),
}

pub(crate) fn run(b: Bench) -> anyhow::Result<ExitCode> {
    match b {
        Bench::Allreduce(a) => bench_allreduce::run(a),
    }
}
