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
//! ```text
//! $ phalanx fr-trace /tmp/fr/trace_
//! flight recorder: 2 dumps under /tmp/fr/trace_ (ranks 0, 2), format 2.10
//! group 0 (default_pg, ranks [0, 1, 2]): every rank completed #35 all_reduce
//!   culprit: rank 1 wrote no dump (stopped, hung or killed) while ranks 0, 2 wait in #36 all_reduce [[16384]] Float
//! ```
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{bail, Context};
use phalanx_pg::flight_recorder::pickle::{self, Value};

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

/// One collective of one rank, as the report compares it.
#[derive(Debug, Clone)]
struct Call {
    op: String,
    sizes: String,
    dtypes: String,
    state: String,
    /// Completed, or retired (Gloo's dumps leave every entry `scheduled` but mark it retired).
    done: bool,
}

impl Call {
    fn signature(&self) -> (&str, &str, &str) {
        (&self.op, &self.sizes, &self.dtypes)
    }

    fn describe(&self, seq: i64) -> String {
        format!("#{seq} {} {} {}", self.op, self.sizes, self.dtypes)
    }
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
    for (name, (desc, ranks)) in groups(&dumps)? {
        let calls = calls_of(&dumps, &name);
        println!(
            "group {name} ({desc}, ranks [{}]): {}",
            join(ranks.iter()),
            verdict(&ranks, &dumps, &calls)
        );
        if args.just_print_entries {
            for (rank, by_seq) in &calls {
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

/// Every group any dump knows: name → (description, job ranks).
fn groups(
    dumps: &BTreeMap<usize, Value>,
) -> anyhow::Result<BTreeMap<String, (String, Vec<usize>)>> {
    let mut out = BTreeMap::new();
    for (rank, d) in dumps {
        let Some(Value::Dict(cfg)) = d.get("pg_config") else {
            bail!("rank {rank}'s dump has no pg_config");
        };
        for (k, g) in cfg {
            let name = k.as_str().map_or_else(|| k.repr(), str::to_string);
            let desc = g.get("desc").and_then(Value::as_str).unwrap_or("undefined");
            let ranks = g.get("ranks").map(parse_ranks).unwrap_or_default();
            out.entry(name).or_insert((desc.to_string(), ranks));
        }
    }
    // Groups the entries name but `pg_config` does not (Gloo's own dumps key their one group
    // by "" while its entries say "0": PyTorch's analyser stops there with a KeyError): their
    // ranks are the dumps that hold entries of them.
    let configured: BTreeSet<String> = out.keys().cloned().collect();
    for (rank, d) in dumps {
        for e in d.get("entries").and_then(Value::as_seq).unwrap_or(&[]) {
            let pg = e
                .get("process_group")
                .and_then(Value::as_seq)
                .unwrap_or(&[]);
            let Some(name) = pg.first().and_then(Value::as_str) else {
                continue;
            };
            if configured.contains(name) {
                continue;
            }
            let desc = pg.get(1).and_then(Value::as_str).unwrap_or("undefined");
            let (_, ranks) = out
                .entry(name.to_string())
                .or_insert_with(|| (desc.to_string(), Vec::new()));
            if !ranks.contains(rank) {
                ranks.push(*rank);
            }
        }
    }
    Ok(out)
}

/// `"[0, 1, 2]"` (PyTorch writes the ranks as text) or a list.
fn parse_ranks(v: &Value) -> Vec<usize> {
    match v {
        Value::Str(s) => s
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .filter_map(|x| x.trim().parse().ok())
            .collect(),
        other => other
            .as_seq()
            .unwrap_or(&[])
            .iter()
            .filter_map(|x| x.as_int().map(|i| i as usize))
            .collect(),
    }
}

/// Each rank's collectives (not point-to-point) of group `name`, by sequence number.
fn calls_of(dumps: &BTreeMap<usize, Value>, name: &str) -> BTreeMap<usize, BTreeMap<i64, Call>> {
    let mut out = BTreeMap::new();
    for (rank, d) in dumps {
        let mut by_seq = BTreeMap::new();
        for e in d.get("entries").and_then(Value::as_seq).unwrap_or(&[]) {
            let pg = e.get("process_group").and_then(Value::as_seq);
            let pg_name = pg.and_then(|p| p.first()).and_then(Value::as_str);
            let p2p = e.get("is_p2p").and_then(Value::as_int) == Some(1);
            if pg_name != Some(name) || p2p {
                continue;
            }
            let Some(seq) = e.get("collective_seq_id").and_then(Value::as_int) else {
                continue;
            };
            let text = |k: &str| e.get(k).map_or("?".into(), Value::repr);
            let profiling = e
                .get("profiling_name")
                .and_then(Value::as_str)
                .unwrap_or("?");
            let state = e.get("state").and_then(Value::as_str).unwrap_or("?");
            by_seq.insert(
                seq,
                Call {
                    op: profiling
                        .rsplit(':')
                        .next()
                        .unwrap_or(profiling)
                        .to_string(),
                    sizes: text("input_sizes"),
                    dtypes: text("input_dtypes"),
                    state: state.to_string(),
                    done: state == "completed"
                        || e.get("retired").and_then(Value::as_int) == Some(1),
                },
            );
        }
        out.insert(*rank, by_seq);
    }
    out
}

/// The report line of one group (Note [Naming the culprit]).
fn verdict(
    ranks: &[usize],
    dumps: &BTreeMap<usize, Value>,
    calls: &BTreeMap<usize, BTreeMap<i64, Call>>,
) -> String {
    let (dumped, missing): (Vec<usize>, Vec<usize>) =
        ranks.iter().partition(|r| dumps.contains_key(r));
    let empty = BTreeMap::new();
    let of = |r: usize| calls.get(&r).unwrap_or(&empty);
    let start = dumped
        .iter()
        .filter_map(|&r| of(r).keys().next().copied())
        .max();
    let end = dumped
        .iter()
        .filter_map(|&r| of(r).keys().next_back().copied())
        .max();
    let (Some(start), Some(end)) = (start, end) else {
        return "no collectives recorded".into();
    };
    let mut last_done: Option<(i64, String)> = None;
    let head = |last: &Option<(i64, String)>| match last {
        Some((s, op)) => format!("every rank completed #{s} {op}"),
        None => "no collective completed by every rank in the dumps".into(),
    };
    for seq in start..=end {
        let (present, absent): (Vec<usize>, Vec<usize>) =
            dumped.iter().partition(|&&r| of(r).contains_key(&seq));
        if present.is_empty() {
            continue;
        }
        let first = &of(present[0])[&seq];
        if !absent.is_empty() {
            let lasts: Vec<String> = absent
                .iter()
                .map(|&r| match of(r).iter().next_back() {
                    Some((s, c)) => format!("rank {r}'s last: #{s} {} ({})", c.op, c.state),
                    None => format!("rank {r} recorded none"),
                })
                .collect();
            return format!(
                "{}\n  culprit: {} never issued {} that {} {} in ({})",
                head(&last_done),
                ranks_word(&absent),
                first.describe(seq),
                ranks_word(&present),
                if present.len() == 1 { "waits" } else { "wait" },
                lasts.join("; ")
            );
        }
        // Ranks grouped by what they ran.
        let mut kinds: Vec<(Call, Vec<usize>)> = Vec::new();
        for &r in &present {
            let c = &of(r)[&seq];
            match kinds
                .iter_mut()
                .find(|(k, _)| k.signature() == c.signature())
            {
                Some((_, rs)) => rs.push(r),
                None => kinds.push((c.clone(), vec![r])),
            }
        }
        if kinds.len() > 1 {
            kinds.sort_by_key(|(_, rs)| rs.len());
            let (odd, odd_ranks) = &kinds[0];
            let others: Vec<String> = kinds[1..]
                .iter()
                .map(|(c, rs)| format!("{} ran {}", ranks_word(rs), c.describe(seq)))
                .collect();
            return format!(
                "{}\n  culprit: {} ran {} where {}",
                head(&last_done),
                ranks_word(odd_ranks),
                odd.describe(seq),
                others.join(" and ")
            );
        }
        let waiting: Vec<usize> = present
            .iter()
            .copied()
            .filter(|&r| !of(r)[&seq].done)
            .collect();
        if !waiting.is_empty() {
            let head = head(&last_done);
            if !missing.is_empty() {
                return format!(
                    "{head}\n  culprit: {} wrote no dump (stopped, hung or killed) while {} {} in {} ({})",
                    ranks_word(&missing),
                    ranks_word(&waiting),
                    if waiting.len() == 1 { "waits" } else { "wait" },
                    first.describe(seq),
                    first.state
                );
            }
            return format!(
                "{head}\n  no culprit in the dumps: {} {} in {}, which every rank issued alike \
                 (look at the ranks' errors: a peer's failure or the network)",
                ranks_word(&waiting),
                if waiting.len() == 1 { "is" } else { "are" },
                first.describe(seq)
            );
        }
        last_done = Some((seq, first.op.clone()));
    }
    let head = head(&last_done);
    if missing.is_empty() {
        format!("{head}; every recorded collective matches and completed")
    } else {
        format!(
            "{head}\n  culprit: {} wrote no dump (stopped, hung or killed); the others completed \
             every collective they recorded",
            ranks_word(&missing)
        )
    }
}

fn join<'a>(it: impl Iterator<Item = &'a usize>) -> String {
    it.map(usize::to_string).collect::<Vec<_>>().join(", ")
}

/// `rank 2` or `ranks 0, 1`.
fn ranks_word(rs: &[usize]) -> String {
    if rs.len() == 1 {
        format!("rank {}", rs[0])
    } else {
        format!("ranks {}", join(rs.iter()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dump of group "0" over `ranks` holding `calls` (sequence number, op, count, state).
    fn dump(ranks: &str, cfg_key: &str, calls: &[(i64, &str, i64, &str)]) -> Value {
        let s = |t: &str| Value::from(t);
        let entries = calls
            .iter()
            .map(|&(seq, op, n, state)| {
                Value::Dict(vec![
                    (
                        s("process_group"),
                        Value::Tuple(vec![s("0"), s("default_pg")]),
                    ),
                    (s("collective_seq_id"), Value::Int(seq)),
                    (s("is_p2p"), Value::Bool(false)),
                    (s("profiling_name"), Value::Str(format!("nccl:{op}"))),
                    (
                        s("input_sizes"),
                        Value::List(vec![Value::List(vec![Value::Int(n)])]),
                    ),
                    (s("input_dtypes"), Value::List(vec![s("Float")])),
                    (s("state"), s(state)),
                    (s("retired"), Value::Bool(state != "started")),
                ])
            })
            .collect();
        let cfg = Value::Dict(vec![(s("desc"), s("default_pg")), (s("ranks"), s(ranks))]);
        Value::Dict(vec![
            (s("pg_config"), Value::Dict(vec![(s(cfg_key), cfg)])),
            (s("entries"), Value::List(entries)),
        ])
    }

    fn report(dumps: BTreeMap<usize, Value>) -> String {
        let (name, (_, ranks)) = groups(&dumps).unwrap().into_iter().next_back().unwrap();
        verdict(&ranks, &dumps, &calls_of(&dumps, &name))
    }

    #[test]
    fn a_rank_that_never_issued_a_collective_is_named_with_its_last() {
        let full = [
            (0, "all_reduce", 4, "completed"),
            (1, "all_reduce", 4, "started"),
        ];
        let short = [(0, "all_reduce", 4, "completed")];
        let dumps = BTreeMap::from([
            (0, dump("[0, 1, 2]", "0", &full)),
            (1, dump("[0, 1, 2]", "0", &full)),
            (2, dump("[0, 1, 2]", "0", &short)),
        ]);
        assert_eq!(
            report(dumps),
            "every rank completed #0 all_reduce\n  culprit: rank 2 never issued #1 all_reduce \
             [[4]] ['Float'] that ranks 0, 1 wait in (rank 2's last: #0 all_reduce (completed))"
        );
    }

    #[test]
    fn every_rank_alike_and_every_dump_there_names_nobody() {
        let calls = [(3, "barrier", 1, "started")];
        let dumps = BTreeMap::from([
            (0, dump("[0, 1]", "0", &calls)),
            (1, dump("[0, 1]", "0", &calls)),
        ]);
        let r = report(dumps);
        assert!(
            r.contains("no culprit in the dumps: ranks 0, 1 are in #3 barrier"),
            "{r}"
        );
    }

    #[test]
    fn a_group_its_config_misnames_is_read_from_its_entries_as_gloo_writes_it() {
        // Gloo leaves its entries `scheduled` and marks them retired once done.
        let calls = [(1, "all_reduce", 8, "scheduled")];
        let dumps = BTreeMap::from([(0, dump("[0]", "", &calls))]);
        let g = groups(&dumps).unwrap();
        assert_eq!(g["0"], ("default_pg".to_string(), vec![0]));
        assert!(report(dumps).ends_with("every recorded collective matches and completed"));
    }
}
