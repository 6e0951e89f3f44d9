//! `phalanx fr-trace PREFIX|DIR`: reads a job's flight-recorder dumps (one per rank, written
//! on a failed collective, Note [Flight recorder] in phalanx-pg) and names, for each process
//! group, the culprit rank and the collective, without PyTorch: PyTorch's
//! `python -m torch.distributed.flight_recorder.fr_trace` reads the same files.
//!
//! Note [Naming the culprit]: within a group every rank numbers its collectives alike, so the
//! dumps are lined up by sequence number, from the first number every dump still holds (the
//! rings may have moved on unevenly). At the first number where the ranks disagree:
//! - some ranks hold it and others do not: those never issued it (a skipped collective);
//! - the ranks ran different operations, sizes or dtypes: the fewest that agree are named
//!   (with three ranks, the odd one out);
//! - every dump holds it, the same, and some never completed it: the ranks of the group that
//!   wrote no dump are named (a stopped, hung or killed rank writes none); when every rank
//!   wrote one, nobody is named and the waits are listed.
//!
//! A group where nobody waits names nobody, even with ranks missing from the dumps: a rank
//! that ended before it wrote its dump (the job stopped once its culprit was known) looks
//! the same as a stopped one, and only a rank that others wait for is evidence.
//!
//! ```text
//! $ phalanx fr-trace /tmp/fr/trace_
//! flight recorder: 2 dumps under /tmp/fr/trace_ (ranks 0, 2), format 2.10
//! group 0 (default_pg, ranks [0, 1, 2]): every rank completed #35 all_reduce
//!   culprit: rank 1 wrote no dump (stopped, hung or killed) while ranks 0, 2 wait in #36 all_reduce [[16384]] Float
//! ```
//!
//! The groups are matched across the dumps in `groups.rs` (Note [Groups across dumps]), and
//! judged in `verdict.rs` (Note [Naming the culprit], Note [Waiting behind another group],
//! Note [Point-to-point waits]).
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{bail, Context};
use phalanx_pg::flight_recorder::pickle::{self, Value};

use verdict::{join, Analysis};

mod groups;
#[cfg(test)]
mod tests;
mod verdict;

/// Flags of `phalanx fr-trace`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The dumps' prefix (`TORCH_FR_DUMP_TEMP_FILE`, e.g. `/tmp/fr/trace_` for
    /// `/tmp/fr/trace_0`, …) or their directory (the prefix is then inferred, as PyTorch's
    /// `fr_trace` does).
    path: PathBuf,
    /// The prefix of the file names inside a directory given as PATH.
    #[arg(long, short)]
    prefix: Option<String>,
    /// Also print every rank's entries, group by group.
    #[arg(long, short = 'j')]
    just_print_entries: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (label, files) = locate(&args.path, args.prefix.as_deref())?;
    let mut dumps: BTreeMap<usize, Value> = BTreeMap::new();
    for (rank, path) in files {
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let v = pickle::decode(&bytes)
            .map_err(|e| anyhow::anyhow!("{}: not a flight-recorder dump: {e}", path.display()))?;
        dumps.insert(rank, v);
    }
    let version = dumps
        .values()
        .next()
        .and_then(|d| d.get("version"))
        .map_or("?".into(), Value::repr);
    println!(
        "flight recorder: {} dump{} under {label} (ranks {}), format {}",
        dumps.len(),
        if dumps.len() == 1 { "" } else { "s" },
        join(dumps.keys()),
        version.trim_matches('\'')
    );
    let analysis = Analysis::new(&dumps)?;
    for (i, g) in analysis.groups.iter().enumerate() {
        println!(
            "group {} ({}, ranks [{}]): {}",
            g.name,
            g.desc,
            join(g.ranks.iter()),
            analysis.text(i)
        );
        if args.just_print_entries {
            for (rank, by_seq) in &analysis.calls[i] {
                for (seq, c) in by_seq {
                    println!("  rank {rank}: {} ({})", c.describe(*seq), c.state);
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The dump files `(rank, path)` that `path` names, and how to name them in the report.
fn locate(path: &Path, prefix: Option<&str>) -> anyhow::Result<(String, Vec<(usize, PathBuf)>)> {
    let (dir, prefix) = if path.is_dir() {
        (path.to_path_buf(), prefix.map(str::to_string))
    } else {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        (dir.unwrap_or(Path::new(".")).to_path_buf(), name)
    };
    let entries = std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?;
    // (prefix, rank, path) of every file named <something><digits>.
    let mut found = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 || name.starts_with('.') {
            continue;
        }
        let (p, r) = name.split_at(name.len() - digits);
        if let Ok(rank) = r.parse::<usize>() {
            found.push((p.to_string(), rank, e.path()));
        }
    }
    let prefix = match prefix {
        Some(p) => p,
        None => {
            let set: BTreeSet<&String> = found.iter().map(|(p, _, _)| p).collect();
            match set.len() {
                1 => set.into_iter().next().unwrap().clone(),
                0 => bail!("no dump files (<prefix><rank>) in {}", dir.display()),
                _ => bail!(
                    "{} holds files of several prefixes ({}); name one with --prefix",
                    dir.display(),
                    set.into_iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            }
        }
    };
    let mut files: Vec<(usize, PathBuf)> = found
        .into_iter()
        .filter(|(p, _, _)| *p == prefix)
        .map(|(_, r, path)| (r, path))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!(
            "no dump files {prefix}<rank> in {} (TORCH_FR_DUMP_TEMP_FILE is the prefix the job \
             wrote them under)",
            dir.display()
        );
    }
    Ok((dir.join(&prefix).display().to_string(), files))
}
