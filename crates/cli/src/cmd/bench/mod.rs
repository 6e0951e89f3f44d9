//! `phalanx bench …`: benchmarks with nccl-tests style output.

mod collective;
mod rendezvous;
mod train;

use std::process::ExitCode;

use collective::Collective;

/// Benchmarks.
#[derive(clap::Subcommand)]
pub(crate) enum Bench {
    /// Allreduce bus bandwidth and latency per message size (nccl-tests' table).
    Allreduce(collective::Args),
    /// Broadcast from rank 0, nccl-tests' table.
    Broadcast(collective::Args),
    /// Reduce to rank 0, nccl-tests' table.
    Reduce(collective::Args),
    /// Allgather (size: the output), nccl-tests' table.
    #[command(alias = "all-gather", alias = "all_gather")]
    Allgather(collective::Args),
    /// Reduce-scatter (size: the input), nccl-tests' table.
    #[command(alias = "reduce_scatter")]
    ReduceScatter(collective::Args),
    /// All-to-all (size: each rank's send buffer), nccl-tests' table.
    #[command(alias = "all_to_all", alias = "alltoall")]
    AllToAll(collective::Args),
    /// Training samples/s for world size 1 and N, with the scaling efficiency.
    Train(train::Args),
    /// Rendezvous time and store traffic for N ranks (threads) on one store.
    Rendezvous(rendezvous::Args),
}

pub(crate) fn run(b: Bench) -> anyhow::Result<ExitCode> {
    match b {
        Bench::Allreduce(a) => collective::run(a, Collective::Allreduce),
        Bench::Broadcast(a) => collective::run(a, Collective::Broadcast),
        Bench::Reduce(a) => collective::run(a, Collective::Reduce),
        Bench::Allgather(a) => collective::run(a, Collective::Allgather),
        Bench::ReduceScatter(a) => collective::run(a, Collective::ReduceScatter),
        Bench::AllToAll(a) => collective::run(a, Collective::AllToAll),
        Bench::Train(a) => train::run(a),
        Bench::Rendezvous(a) => rendezvous::run(a),
    }
}
