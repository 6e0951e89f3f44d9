//! `phalanx launch [flags] -- PROGRAM ARGS...`: torchrun's interface (see docs/launch.md).
use std::ffi::OsString;
use std::process::ExitCode;

/// Start PROGRAM on --nproc-per-node processes per node, with the torchrun environment
/// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...). Node 0 hosts the rendezvous store. Every
/// output line is prefixed `[rank N]: `; when a worker fails the others are stopped and the
/// root cause is printed first. Every flag can also be set as PET_<FLAG>.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
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

const EXAMPLES: &str = "\
Examples:
  phalanx launch --standalone --nproc-per-node 2 -- phalanx bench allreduce --sizes 4K
  PHALANX_TOKEN=$SECRET phalanx launch --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 \\
      --nproc-per-node 4 -- ./train --epochs 3        (and --node-rank 1 on the other host)

Exit status: 0 when every worker succeeded; the first failing worker's code (128 + signal when
a signal ended it); 125 when --max-restarts K > 0 ran out; 128 + signal when the launcher was
signalled. Full manual: docs/launch.md.";

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    phalanx_launch::launch(&args.launch, &args.program)
}
