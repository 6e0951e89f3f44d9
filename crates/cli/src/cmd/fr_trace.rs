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
    for Group {
        name,
        desc,
        ranks,
        names,
    } in groups(&dumps)?
    {
        let calls = calls_of(&dumps, &names);
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

/// One process group across the dumps.
struct Group {
    /// Its name in the report: the lowest dumped rank's.
    name: String,
    desc: String,
    /// Its ranks, in the job's numbering.
    ranks: Vec<usize>,
    /// The name each dumped rank knows it by.
    names: BTreeMap<usize, String>,
}

// Note [Groups across dumps]
// PyTorch numbers its groups alike on every rank, since every rank calls `new_group` for every
// group. A phalanx rank creates only the subgroups it is in (a mesh's "tp", "dp" and "pp"
// groups), numbered in the order it created them, so the group that rank 0 calls "1" (its
// pipeline peers [0, 2]) is not the group rank 1 calls "1" ([1, 3]). A group is therefore
// known by its ranks: the k-th group over ranks R that a rank created is the k-th one over R
// that each other rank of R created, since they create the groups of one mesh in one order.

/// Every group any dump knows, matched across the dumps by its ranks (Note [Groups across
/// dumps]), in the order of their names.
fn groups(dumps: &BTreeMap<usize, Value>) -> anyhow::Result<Vec<Group>> {
    let mut out: BTreeMap<(Vec<usize>, usize), Group> = BTreeMap::new();
    for (rank, d) in dumps {
        let Some(Value::Dict(cfg)) = d.get("pg_config") else {
            bail!("rank {rank}'s dump has no pg_config");
        };
        let mut seen: BTreeMap<Vec<usize>, usize> = BTreeMap::new();
        let mut mine: Vec<(String, String, Vec<usize>)> = cfg
            .iter()
            .map(|(k, g)| {
                let name = k.as_str().map_or_else(|| k.repr(), str::to_string);
                let desc = g.get("desc").and_then(Value::as_str).unwrap_or("undefined");
                let ranks = g.get("ranks").map(parse_ranks).unwrap_or_default();
                (name, desc.to_string(), ranks)
            })
            .collect();
        // Creation order: the names are the numbers a rank gave its groups in turn.
        mine.sort_by_key(|(name, _, _)| order(name));
        for (name, desc, ranks) in mine {
            let k = seen.entry(ranks.clone()).or_default();
            let group = out.entry((ranks.clone(), *k)).or_insert_with(|| Group {
                name: name.clone(),
                desc,
                ranks,
                names: BTreeMap::new(),
            });
            group.names.insert(*rank, name);
            *k += 1;
        }
    }
    let mut groups: Vec<Group> = out.into_values().collect();
    // Groups the entries name but `pg_config` does not (Gloo's own dumps key their one group
    // by "" while its entries say "0": PyTorch's analyser stops there with a KeyError): their
    // ranks are the dumps that hold entries of them.
    let configured: BTreeSet<(usize, String)> = groups
        .iter()
        .flat_map(|g| g.names.iter().map(|(r, n)| (*r, n.clone())))
        .collect();
    let mut unconfigured: BTreeMap<String, Group> = BTreeMap::new();
    for (rank, d) in dumps {
        for e in d.get("entries").and_then(Value::as_seq).unwrap_or(&[]) {
            let pg = e
                .get("process_group")
                .and_then(Value::as_seq)
                .unwrap_or(&[]);
            let Some(name) = pg.first().and_then(Value::as_str) else {
                continue;
            };
            if configured.contains(&(*rank, name.to_string())) {
                continue;
            }
            let desc = pg.get(1).and_then(Value::as_str).unwrap_or("undefined");
            let group = unconfigured
                .entry(name.to_string())
                .or_insert_with(|| Group {
                    name: name.to_string(),
                    desc: desc.to_string(),
                    ranks: Vec::new(),
                    names: BTreeMap::new(),
                });
            if !group.ranks.contains(rank) {
                group.ranks.push(*rank);
            }
            group.names.insert(*rank, name.to_string());
        }
    }
    groups.extend(unconfigured.into_values());
    groups.sort_by_key(|g| order(&g.name));
    Ok(groups)
}

/// Groups by name: the names that are not numbers first, then the numbers in order.
fn order(name: &str) -> (bool, u64, String) {
    let number = name.parse::<u64>();
    (number.is_ok(), number.unwrap_or(0), name.to_string())
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

/// Each rank's collectives (not point-to-point) of the group each rank calls `names[rank]`, by
/// sequence number.
fn calls_of(
    dumps: &BTreeMap<usize, Value>,
    names: &BTreeMap<usize, String>,
) -> BTreeMap<usize, BTreeMap<i64, Call>> {
    let mut out = BTreeMap::new();
    for (rank, d) in dumps {
        let Some(name) = names.get(rank).map(String::as_str) else {
            continue;
        };
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
        dump_groups(&[(cfg_key, ranks)], "0", calls)
    }

    /// A dump of the groups `(name, ranks)`, holding `calls` of group `of`.
    fn dump_groups(groups: &[(&str, &str)], of: &str, calls: &[(i64, &str, i64, &str)]) -> Value {
        let s = |t: &str| Value::from(t);
        let entries = calls
            .iter()
            .map(|&(seq, op, n, state)| {
                Value::Dict(vec![
                    (
                        s("process_group"),
                        Value::Tuple(vec![s(of), s("default_pg")]),
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
        let cfg = groups
            .iter()
            .map(|&(name, ranks)| {
                let g = Value::Dict(vec![(s("desc"), s("default_pg")), (s("ranks"), s(ranks))]);
                (s(name), g)
            })
            .collect();
        Value::Dict(vec![
            (s("pg_config"), Value::Dict(cfg)),
            (s("entries"), Value::List(entries)),
        ])
    }

    fn report(dumps: BTreeMap<usize, Value>) -> String {
        let g = groups(&dumps).unwrap().into_iter().next_back().unwrap();
        verdict(&g.ranks, &dumps, &calls_of(&dumps, &g.names))
    }

    /// Ranks number their subgroups each in its own order (Note [Groups across dumps]): rank
    /// 0's group "1" and rank 2's group "2" are both the group of ranks [0, 2], and rank 2
    /// never issued its #1 there.
    #[test]
    fn a_subgroup_is_matched_across_dumps_by_its_ranks_not_its_name() {
        let both = [
            (0, "all_reduce", 4, "completed"),
            (1, "all_reduce", 4, "started"),
        ];
        let one = [(0, "all_reduce", 4, "completed")];
        let world = ("0", "[0, 1, 2, 3]");
        let dumps = BTreeMap::from([
            (0, dump_groups(&[world, ("1", "[0, 2]")], "1", &both)),
            (
                2,
                dump_groups(&[world, ("1", "[2, 3]"), ("2", "[0, 2]")], "2", &one),
            ),
        ]);
        let g = groups(&dumps).unwrap();
        let pair = g.iter().find(|g| g.ranks == [0, 2]).unwrap();
        assert_eq!(
            pair.names,
            BTreeMap::from([(0, "1".into()), (2, "2".into())])
        );
        let r = verdict(&pair.ranks, &dumps, &calls_of(&dumps, &pair.names));
        assert!(
            r.contains("culprit: rank 2 never issued #1 all_reduce"),
            "{r}"
        );
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
        let zero = g.iter().find(|g| g.name == "0").unwrap();
        assert_eq!(
            (zero.desc.as_str(), zero.ranks.as_slice()),
            ("default_pg", &[0][..])
        );
        assert!(report(dumps).ends_with("every recorded collective matches and completed"));
    }
}
