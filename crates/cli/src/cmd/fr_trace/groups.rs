//! One process group across the dumps, matched by its ranks (Note [Groups across dumps]).
use std::collections::{BTreeMap, BTreeSet};

use anyhow::bail;
use phalanx_pg::flight_recorder::pickle::Value;

/// One process group across the dumps.
pub(super) struct Group {
    /// Its name in the report: the lowest dumped rank's.
    pub(super) name: String,
    pub(super) desc: String,
    /// Its ranks, in the job's numbering.
    pub(super) ranks: Vec<usize>,
    /// The name each dumped rank knows it by.
    pub(super) names: BTreeMap<usize, String>,
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
pub(super) fn groups(dumps: &BTreeMap<usize, Value>) -> anyhow::Result<Vec<Group>> {
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
