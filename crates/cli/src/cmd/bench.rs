//! `phalanx bench …` (under construction).
use std::process::ExitCode;

/// Benchmarks.
#[derive(clap::Subcommand)]
pub(crate) enum Bench {}

pub(crate) fn run(b: Bench) -> anyhow::Result<ExitCode> {
    match b {}
}
