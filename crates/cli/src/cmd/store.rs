//! `phalanx store` (under construction).
use std::process::ExitCode;

/// Flags of `phalanx store`.
#[derive(clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("phalanx store is not built yet")
}
