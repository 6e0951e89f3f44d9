//! `phalanx launch [flags] -- PROGRAM ARGS...`: torchrun's interface (see docs/launch.md).
use std::ffi::OsString;
use std::process::ExitCode;

/// Start PROGRAM on --nproc-per-node processes per node, with the torchrun environment
/// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...). Node 0 hosts the rendezvous store. Every
/// output line is prefixed `[rank N]: `; when a worker fails the others are stopped and the
/// root cause is printed first. Every flag can also be set as PET_<FLAG>.
// This doc comment is the subcommand's --help text, printed as written: `<FLAG>` is no HTML.
#[allow(rustdoc::invalid_html_tags)]
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct Args {
    #[command(flatten)]
    launch: phalanx_launch::LaunchArgs,

    /// Run PROGRAM as a Python module: `python3 -m PROGRAM ARGS` (torchrun's `-m`).
    #[arg(short = 'm', long, env = "PET_MODULE",
          value_parser = clap::builder::BoolishValueParser::new(), num_args = 0,
          default_missing_value = "true", default_value = "false")]
    module: bool,

    /// Run PROGRAM as it is, even a `.py` file (torchrun's `--no-python`). Without it, a
    /// `.py` PROGRAM runs under `python3` (or `$PHALANX_PYTHON`).
    #[arg(long = "no-python", alias = "no_python", env = "PET_NO_PYTHON",
          value_parser = clap::builder::BoolishValueParser::new(), num_args = 0,
          default_missing_value = "true", default_value = "false")]
    no_python: bool,

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
  phalanx launch --standalone --nproc_per_node=4 train.py --epochs 3   (runs python3 train.py)
  phalanx launch --standalone --nproc-per-node 2 -m mypkg.train        (python3 -m mypkg.train)
  PHALANX_TOKEN=$SECRET phalanx launch --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 \\
      --nproc-per-node 4 -- ./train --epochs 3        (and --node-rank 1 on the other host)

Exit status: 0 when every worker succeeded; the first failing worker's code (128 + signal when
a signal ended it); 125 when --max-restarts K > 0 ran out; 128 + signal when the launcher was
signalled. Full manual: docs/launch.md.";

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    refuse_unknown_flag(&args.program)?;
    let argv = phalanx_launch::program_argv(
        &args.program,
        args.module,
        args.no_python,
        &phalanx_launch::python(),
    )?;
    phalanx_launch::launch(&args.launch, &argv)
}

/// A first word of PROGRAM that looks like a flag is a flag `phalanx launch` does not know
/// (clap takes everything from the first word it cannot place as the program): named as one,
/// never started as the program.
fn refuse_unknown_flag(program: &[OsString]) -> anyhow::Result<()> {
    let Some(first) = program.first().and_then(|f| f.to_str()) else {
        return Ok(());
    };
    if !first.starts_with('-') || first == "-" {
        return Ok(());
    }
    let name = first.split_once('=').map_or(first, |(n, _)| n);
    // The flags of this subcommand, built from its own arguments (not through `crate::Cli`,
    // which would make this module and main.rs import each other).
    let launch = <Args as clap::Args>::augment_args(clap::Command::new("launch"));
    let known: Vec<String> = launch
        .get_arguments()
        .flat_map(|a| {
            let longs = a
                .get_long()
                .into_iter()
                .chain(a.get_all_aliases().unwrap_or_default());
            longs.map(|l| format!("--{l}")).collect::<Vec<_>>()
        })
        .collect();
    let near = known
        .iter()
        .map(|k| (phalanx_core::env::edit_distance(name, k), k))
        .filter(|(d, _)| *d <= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| format!(" (did you mean {k}?)"))
        .unwrap_or_default();
    anyhow::bail!(
        "unknown flag {name}{near}; the program starts at the first word that \
         is not a launch flag, and a program cannot start with `-` (write ./{first} for a file \
         of that name). `phalanx launch --help` lists the flags"
    )
}
