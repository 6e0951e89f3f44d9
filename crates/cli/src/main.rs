//! The `phalanx` binary: one entry point for launching, training, benchmarking and debugging
//! distributed jobs. Each subcommand lives in `src/cmd/<name>.rs`; its `--help` is its manual.

use clap::{Parser, Subcommand};

mod cmd;

/// Distributed data-parallel training for Rust.
#[derive(Parser)]
#[command(name = "phalanx", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a program on N processes per host (torchrun's interface).
    Launch(cmd::launch::Args),
    /// Train the seed MLP (the main job), the CNN, the transformer or the GPT language model;
    /// launches itself unless started by a launcher. (Boxed: its flags outweigh the others'.)
    Train(Box<cmd::train::Args>),
    /// Benchmarks: `phalanx bench allreduce`, `phalanx bench train`.
    #[command(subcommand)]
    Bench(cmd::bench::Bench),
    /// Checkpoints: `phalanx checkpoint consolidate DIR --out FILE` (a sharded checkpoint as
    /// one file for PyTorch), `phalanx checkpoint list DIR`.
    #[command(subcommand)]
    Checkpoint(cmd::checkpoint::Checkpoint),
    /// Run a standalone rendezvous store for multi-host jobs.
    Store(cmd::store::Args),
    /// Print the indices a rank of a DistributedSampler sees.
    Sampler(cmd::sampler::Args),
    /// List the environment variables phalanx reads (`--markdown` renders docs/env-vars.md).
    Env(cmd::env::Args),
    /// Preflight with the launch flags: interfaces, reachability, per-link latency and
    /// bandwidth, shared memory, clock skew, and the slowest link.
    Doctor(cmd::doctor::Args),
    /// Read a job's flight-recorder dumps (`TORCH_FR_DUMP_TEMP_FILE`, PyTorch's format) and
    /// name the culprit rank and collective of each process group, without PyTorch.
    FrTrace(cmd::fr_trace::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging();
    let result = match cli.command {
        Command::Launch(a) => cmd::launch::run(a),
        Command::Train(a) => cmd::train::run(*a),
        Command::Bench(b) => cmd::bench::run(b),
        Command::Checkpoint(c) => cmd::checkpoint::run(c),
        Command::Store(a) => cmd::store::run(a),
        Command::Sampler(a) => cmd::sampler::run(a),
        Command::Env(a) => cmd::env::run(a),
        Command::Doctor(a) => cmd::doctor::run(a),
        Command::FrTrace(a) => cmd::fr_trace::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("phalanx: error: {}", error_chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr at the level `PHALANX_DEBUG` names, else `NCCL_DEBUG`, else
/// `TORCH_DISTRIBUTED_DEBUG` (Note [Borrowed variables] in phalanx-core; WARN by default; INFO
/// prints each rank's interface, addresses, transports and algorithms, like `NCCL_DEBUG=INFO`).
/// A value that is no level is named with its variable, and WARN is used: a typo in a debug
/// variable should not stop a job.
fn init_logging() {
    let level = match phalanx_core::env::log_level() {
        Ok(s) => s.level,
        Err(e) => {
            eprintln!("phalanx: warning: {e}; logging at WARN");
            phalanx_core::env::LogLevel::Warn
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(tracing_subscriber::EnvFilter::new(level.filter()))
        .try_init();
}

/// The error and its causes joined by ": ", skipping a cause whose text its parent already
/// spells out (our library errors name their cause in their own message).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}
