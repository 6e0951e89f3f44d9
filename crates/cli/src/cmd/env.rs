//! `phalanx env`: the registry of environment variables, as a table or as docs/env-vars.md.
use std::process::ExitCode;

use phalanx_core::env;

/// Flags of `phalanx env`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Print docs/env-vars.md instead of a table.
    #[arg(long)]
    markdown: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.markdown {
        print!("{}", env::markdown());
        return Ok(ExitCode::SUCCESS);
    }
    for v in env::REGISTRY {
        let current = env::get(*v);
        let shown = match (v.name, current) {
            ("PHALANX_TOKEN", Some(_)) => "<set, hidden>".to_string(),
            (_, Some(c)) => c,
            (_, None) => format!(
                "(default {})",
                if v.default.is_empty() {
                    "unset"
                } else {
                    v.default
                }
            ),
        };
        println!("{:<24} {}", v.name, shown);
    }
    for (name, near) in env::unknown_phalanx_vars() {
        match near {
            Some(n) => eprintln!("warning: unknown variable {name}; did you mean {n}?"),
            None => eprintln!("warning: unknown variable {name}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
