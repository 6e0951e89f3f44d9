//! `phalanx sampler` (under construction).
use std::process::ExitCode;

/// Flags of `phalanx sampler`.
#[derive(clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("phalanx sampler is not built yet")
}
