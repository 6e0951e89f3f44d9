//! `phalanx bench …`: benchmarks with nccl-tests style output.

mod allreduce;
mod rendezvous;
mod train;

use std::process::ExitCode;

/// Benchmarks.
#[derive(clap::Subcommand)]
pub(crate) enum Bench {
    /// Allreduce bus bandwidth and latency per message size (nccl-tests' table).
    Allreduce(allreduce::Args),
    /// Training samples/s for world size 1 and N, with the scaling efficiency.
    Train(train::Args),
    /// Rendezvous time and store traffic for N ranks (threads) on one store.
    Rendezvous(rendezvous::Args),
}

pub(crate) fn run(b: Bench) -> anyhow::Result<ExitCode> {
    match b {
        Bench::Allreduce(a) => allreduce::run(a),
        Bench::Train(a) => train::run(a),
        Bench::Rendezvous(a) => rendezvous::run(a),
    }
}
