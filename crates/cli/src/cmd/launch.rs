//! `phalanx launch [flags] -- PROGRAM ARGS...`: torchrun's interface (see docs/launch.md).
use std::ffi::OsString;
use std::process::ExitCode;

/// Start PROGRAM on --nproc-per-node processes per node, with the torchrun environment
/// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...). Node 0 hosts the rendezvous store. Every
/// output line is prefixed `[rank N]: `; when a worker fails the others are stopped and the
/// root cause is printed first. Every flag can also be set as PET_<FLAG>.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    launch: phalanx_launch::LaunchArgs,

    /// The program to run and its arguments (`${local_rank}` is replaced in each).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM ARGS"
    )]
    program: Vec<OsString>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    phalanx_launch::launch(&args.launch, &args.program)
}
