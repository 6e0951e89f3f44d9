//! `phalanx launch` (under construction).
use std::process::ExitCode;

/// Flags of `phalanx launch`.
#[derive(clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("phalanx launch is not built yet")
}
