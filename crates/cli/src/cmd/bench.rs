//! `phalanx bench …`: benchmarks with nccl-tests style output.
use std::process::ExitCode;

use super::{bench_allreduce, bench_rendezvous, bench_train};

/// Benchmarks.
#[derive(clap::Subcommand)]
pub(crate) enum Bench {
    /// Allreduce bus bandwidth and latency per message size (nccl-tests' table).
    Allreduce(bench_allreduce::Args),
    /// Training samples/s for world size 1 and N, with the scaling efficiency.
    Train(bench_train::Args),
    /// Rendezvous time and store traffic for N ranks (threads) on one store.
    Rendezvous(bench_rendezvous::Args),
}

pub(crate) fn run(b: Bench) -> anyhow::Result<ExitCode> {
    match b {
        Bench::Allreduce(a) => bench_allreduce::run(a),
        Bench::Train(a) => bench_train::run(a),
        Bench::Rendezvous(a) => bench_rendezvous::run(a),
    }
}
