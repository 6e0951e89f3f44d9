//! `phalanx launch`: torchrun's launcher for phalanx jobs. A node agent starts
//! `--nproc-per-node` workers with the torchrun environment (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, …, plus `PHALANX_TOKEN`), hosts the rendezvous store on node 0, prefixes their
//! output with `[rank N]: `, forwards signals, and when a worker fails stops the others and
//! prints which rank failed first and why; `--max-restarts` starts a new round instead.
//!
//! ```
//! use std::ffi::OsString;
//! use phalanx_launch::{launch, LaunchArgs};
//!
//! let args = LaunchArgs { nproc_per_node: 2, standalone: true, ..LaunchArgs::default() };
//! let program: Vec<OsString> = ["sh", "-c", "test \"$WORLD_SIZE\" = 2"]
//!     .iter().map(OsString::from).collect();
//! let code = launch(&args, &program).unwrap();
//! assert_eq!(code, std::process::ExitCode::SUCCESS);
//! ```
//!
//! See `docs/launch.md` for the behaviour in full: rendezvous, failure handling, restarts,
//! exit codes.
#![warn(missing_docs, unreachable_pub)]

use std::ffi::OsString;
use std::process::ExitCode;

mod agent;
mod args;
mod cause;
mod diagnosis;
mod elastic;
mod error;
mod job;
mod output;
mod program;
pub mod progress;
mod rdzv;
mod report;
mod round;
mod signals;
mod summary;
mod tee;
mod worker;
mod worker_env;

pub use agent::EXIT_RESTARTS_EXHAUSTED;
pub use args::{LaunchArgs, Nnodes};
pub use error::Error;
pub use program::{program_argv, python};
pub use rdzv::{RdzvBackend, RdzvConf, C10D_DEFAULT_PORT};
pub use signals::signal_name;
pub use tee::{Streams, Tee};

/// Whether this process is a worker started by a launcher (so it must not launch itself):
/// [`phalanx_core::Launcher::detect`] found one (phalanx, torchrun, an MPI launcher or a Slurm
/// step; not a Kubeflow agent).
pub fn started_by_launcher() -> bool {
    phalanx_core::Launcher::detect().is_some()
}

/// Runs `program` (`program[0]` and its arguments) under a node agent configured by `args`
/// and returns the exit code `phalanx launch` should end with. Call it from the main thread:
/// workers are tied to the lifetime of the thread that starts them.
pub fn launch(args: &LaunchArgs, program: &[OsString]) -> anyhow::Result<ExitCode> {
    args.validate()?;
    if program.is_empty() {
        return Err(Error::NoProgram.into());
    }
    signals::install(&args.signals_to_handle);
    // What the nodes compare: a node's own launch flags (--node-rank, --nproc-per-node) differ
    // from the others' when `phalanx train` or `bench` relaunches itself; the rest should not.
    let signature = rdzv::claims::program_signature(&args::without_launch_flags(program));
    let agent = agent::Agent::start(args, program, signature)?;
    let code = agent.run();
    progress::finish();
    code
}

/// Launches the current executable with the current arguments as the workers (`phalanx train`
/// and `phalanx bench` do this when no launcher started them). The workers see `RANK` and
/// `PHALANX_LAUNCHED=1`, so they do not launch again.
pub fn relaunch_self(args: &LaunchArgs) -> anyhow::Result<ExitCode> {
    if started_by_launcher() {
        anyhow::bail!("relaunch_self called inside a worker (RANK or PHALANX_LAUNCHED is set)");
    }
    let exe = std::env::current_exe()?;
    let program: Vec<OsString> = std::iter::once(exe.into_os_string())
        .chain(std::env::args_os().skip(1))
        .collect();
    launch(args, &program)
}
