//! `phalanx train` (under construction).
use std::process::ExitCode;

/// Flags of `phalanx train`.
#[derive(clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("phalanx train is not built yet")
}
