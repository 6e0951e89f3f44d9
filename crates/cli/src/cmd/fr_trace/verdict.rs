//! One group's verdict (Note [Naming the culprit] in the parent), and the report that reads
//! every group's together (Note [Waiting behind another group]).
use std::collections::{BTreeMap, BTreeSet};

use phalanx_pg::flight_recorder::pickle::Value;

use super::groups::{groups, Group};

/// One collective of one rank, as the report compares it.
#[derive(Debug, Clone)]
pub(super) struct Call {
    pub(super) op: String,
    sizes: String,
    dtypes: String,
    pub(super) state: String,
    /// Completed, or retired (Gloo's dumps leave every entry `scheduled` but mark it retired).
    done: bool,
}

impl Call {
    /// One entry of a dump.
    fn of(e: &Value) -> Call {
        let text = |k: &str| e.get(k).map_or("?".into(), Value::repr);
        let profiling = e
            .get("profiling_name")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let state = e.get("state").and_then(Value::as_str).unwrap_or("?");
        Call {
            op: profiling
                .rsplit(':')
                .next()
                .unwrap_or(profiling)
                .to_string(),
            sizes: text("input_sizes"),
            dtypes: text("input_dtypes"),
            state: state.to_string(),
            done: state == "completed" || e.get("retired").and_then(Value::as_int) == Some(1),
        }
    }

    fn signature(&self) -> (&str, &str, &str) {
        (&self.op, &self.sizes, &self.dtypes)
    }

    pub(super) fn describe(&self, seq: i64) -> String {
        format!("#{seq} {} {} {}", self.op, self.sizes, self.dtypes)
    }
}

/// Each rank's collectives (not point-to-point) of the group each rank calls `names[rank]`, by
/// sequence number.
pub(super) fn calls_of(
    dumps: &BTreeMap<usize, Value>,
    names: &BTreeMap<usize, String>,
) -> BTreeMap<usize, BTreeMap<i64, Call>> {
    let mut out = BTreeMap::new();
    for (rank, d) in dumps {
        let mut by_seq = BTreeMap::new();
        for e in entries_in(d, names.get(rank), false) {
            let Some(seq) = e.get("collective_seq_id").and_then(Value::as_int) else {
                continue;
            };
            by_seq.insert(seq, Call::of(e));
        }
        if names.contains_key(rank) {
            out.insert(*rank, by_seq);
        }
    }
    out
}

/// Each rank's point-to-point operation under way in the group each rank calls
/// `names[rank]`: its last one there, where it never completed (Note [Point-to-point waits]).
pub(super) fn p2p_of(
    dumps: &BTreeMap<usize, Value>,
    names: &BTreeMap<usize, String>,
) -> BTreeMap<usize, Call> {
    dumps
        .iter()
        .filter_map(|(rank, d)| {
            let last = Call::of(entries_in(d, names.get(rank), true).last()?);
            (!last.done).then_some((*rank, last))
        })
        .collect()
}

/// A dump's entries in the group it calls `name`: its point-to-point ones (`p2p`) or its
/// collectives.
fn entries_in<'a>(d: &'a Value, name: Option<&String>, p2p: bool) -> Vec<&'a Value> {
    let Some(name) = name else {
        return Vec::new();
    };
    d.get("entries")
        .and_then(Value::as_seq)
        .unwrap_or(&[])
        .iter()
        .filter(|e| {
            let pg = e.get("process_group").and_then(Value::as_seq);
            let pg_name = pg.and_then(|p| p.first()).and_then(Value::as_str);
            let is_p2p = e.get("is_p2p").and_then(Value::as_int) == Some(1);
            pg_name == Some(name.as_str()) && is_p2p == p2p
        })
        .collect()
}

/// One group's verdict (Note [Naming the culprit]).
pub(super) struct Verdict {
    /// Its report text.
    pub(super) text: String,
    /// The ranks it names as the culprit.
    culprits: Vec<usize>,
    /// A collective some ranks never issued: what a report through another group needs
    /// (Note [Waiting behind another group]).
    skipped: Option<Skipped>,
}

/// A collective that `present` issued and `absent` never did.
struct Skipped {
    head: String,
    absent: Vec<usize>,
    present: Vec<usize>,
    call: String,
}

impl Verdict {
    fn plain(text: String) -> Verdict {
        Verdict {
            text,
            culprits: Vec::new(),
            skipped: None,
        }
    }

    fn naming(text: String, culprits: &[usize]) -> Verdict {
        Verdict {
            text,
            culprits: culprits.to_vec(),
            skipped: None,
        }
    }
}

/// The verdict of one group (Note [Naming the culprit]).
pub(super) fn verdict(
    ranks: &[usize],
    dumps: &BTreeMap<usize, Value>,
    calls: &BTreeMap<usize, BTreeMap<i64, Call>>,
    p2p: &BTreeMap<usize, Call>,
) -> Verdict {
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
        let head = "no collectives recorded";
        return p2p_verdict(head, ranks, &missing, p2p)
            .unwrap_or_else(|| Verdict::plain(head.into()));
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
            let text = format!(
                "{}\n  culprit: {} never issued {} that {} {} in ({})",
                head(&last_done),
                ranks_word(&absent),
                first.describe(seq),
                ranks_word(&present),
                if present.len() == 1 { "waits" } else { "wait" },
                lasts.join("; ")
            );
            return Verdict {
                text,
                culprits: absent.clone(),
                skipped: Some(Skipped {
                    head: head(&last_done),
                    call: first.describe(seq),
                    absent,
                    present,
                }),
            };
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
            let text = format!(
                "{}\n  culprit: {} ran {} where {}",
                head(&last_done),
                ranks_word(odd_ranks),
                odd.describe(seq),
                others.join(" and ")
            );
            return Verdict::naming(text, odd_ranks);
        }
        let waiting: Vec<usize> = present
            .iter()
            .copied()
            .filter(|&r| !of(r)[&seq].done)
            .collect();
        if !waiting.is_empty() {
            let head = head(&last_done);
            if !missing.is_empty() {
                let text = format!(
                    "{head}\n  culprit: {} wrote no dump (stopped, hung or killed) while {} {} in {} ({})",
                    ranks_word(&missing),
                    ranks_word(&waiting),
                    if waiting.len() == 1 { "waits" } else { "wait" },
                    first.describe(seq),
                    first.state
                );
                return Verdict::naming(text, &missing);
            }
            return Verdict::plain(format!(
                "{head}\n  no culprit in the dumps: {} {} in {}, which every rank issued alike \
                 (look at the ranks' errors: a peer's failure or the network)",
                ranks_word(&waiting),
                if waiting.len() == 1 { "is" } else { "are" },
                first.describe(seq)
            ));
        }
        last_done = Some((seq, first.op.clone()));
    }
    let head = head(&last_done);
    if let Some(v) = p2p_verdict(&head, ranks, &missing, p2p) {
        return v;
    }
    if missing.is_empty() {
        Verdict::plain(format!(
            "{head}; every recorded collective matches and completed"
        ))
    } else {
        // Nobody here waits for them: no evidence against them in this group. A rank that
        // ended before it wrote its dump (the launcher stops the job once it has a culprit)
        // looks the same as a stopped one, so the group where somebody waits names it.
        Verdict::plain(format!(
            "{head}\n  no dump from {} (stopped, hung, killed, or ended before writing one); \
             nobody here waits for {}: the others completed every collective they recorded",
            ranks_word(&missing),
            if missing.len() == 1 { "it" } else { "them" }
        ))
    }
}

// Note [Point-to-point waits]
// A pipeline's stages wait for each other in sends and receives (`batch_isend_irecv`), which
// are not numbered with the group's collectives and so are not lined up with them (nor does
// PyTorch's analysis). But a rank that failed waiting in one recorded it unfinished: where a
// rank of a group of two wrote no dump and the other waits in a point-to-point operation of
// that group, its peer can only be the silent rank, which is named as a stopped rank that
// others wait for in a collective is. In a larger group the dump does not say which peer an
// operation waits for (a batch may hold several), so the wait is reported, and nobody named;
// and a chain through a silent rank (Note [Waiting behind another group]) prefers such a
// group only where it is a pair. The same race as a collective's applies: a peer that failed
// elsewhere, and was stopped by the launcher before it wrote its dump, leaves its partner's
// exchange unfinished and looks silent; where the job's own failure named its culprit
// first (the launcher's diagnosis, the ranks' errors), that is the one to trust.

/// The verdict of a group where a rank waits in a point-to-point operation (Note
/// [Point-to-point waits]); `None` where none does.
fn p2p_verdict(
    head: &str,
    ranks: &[usize],
    missing: &[usize],
    p2p: &BTreeMap<usize, Call>,
) -> Option<Verdict> {
    let waiting: Vec<usize> = ranks
        .iter()
        .copied()
        .filter(|r| p2p.contains_key(r))
        .collect();
    let first = p2p.get(waiting.first()?)?;
    let verb = if waiting.len() == 1 { "waits" } else { "wait" };
    let waits = format!(
        "{} {verb} in a point-to-point {} ({})",
        ranks_word(&waiting),
        first.op,
        first.state
    );
    Some(match (missing, ranks.len()) {
        ([], _) => Verdict::plain(format!("{head}; {waits}, with a rank that wrote its dump")),
        (_, 2) => Verdict::naming(
            format!(
                "{head}\n  culprit: {} wrote no dump (stopped, hung or killed) while {waits} \
                 with it",
                ranks_word(missing)
            ),
            missing,
        ),
        _ => Verdict::plain(format!(
            "{head}\n  no dump from {} (stopped, hung, killed, or ended before writing one); \
             {waits}, with a peer the dump does not name",
            ranks_word(missing)
        )),
    })
}

/// Every group's calls and verdict, read together (Note [Waiting behind another group]).
pub(super) struct Analysis {
    pub(super) groups: Vec<Group>,
    /// Each group's collectives, by rank and sequence number.
    pub(super) calls: Vec<BTreeMap<usize, BTreeMap<i64, Call>>>,
    /// Each group's point-to-point operations under way, by rank.
    p2p: Vec<BTreeMap<usize, Call>>,
    pub(super) verdicts: Vec<Verdict>,
    /// The ranks that wrote a dump.
    dumped: BTreeSet<usize>,
}

// Note [Waiting behind another group]
// A rank of a cut model is in several groups, and a stopped rank holds up its partners in
// one of them; a partner that waits there never issues what the rest of the job waits for
// in another group (the world's evaluation at an epoch's end, say). Read group by group,
// that partner "never issued" the world's collective: true, and the wrong rank to look at.
// So when every rank a group names as never having issued a collective is itself waiting,
// unfinished, in another group whose verdict names somebody else, the report follows the
// chain and names that group's culprit, through the waiting rank and the group it waits in
// (to any depth, each group once). A rank with no collective of its own under way may wait
// in a send or a receive (a pipeline's, which are not lined up with the collectives: Note
// [Point-to-point waits]) or between two collectives; if it shares a group with a rank that
// wrote no dump (the group it waits in point-to-point, else the smallest such group), that
// rank is named: a rank that wrote its dump was alive when the job failed, one that wrote
// none was stopped, hung or killed. A chain that leads back into the group itself (two
// groups each waiting for the other: collectives issued in different orders) names nobody
// through it: the group's own verdict stands.
//
impl Analysis {
    pub(super) fn new(dumps: &BTreeMap<usize, Value>) -> anyhow::Result<Analysis> {
        let groups = groups(dumps)?;
        let calls: Vec<_> = groups.iter().map(|g| calls_of(dumps, &g.names)).collect();
        let p2p: Vec<_> = groups.iter().map(|g| p2p_of(dumps, &g.names)).collect();
        let verdicts = groups
            .iter()
            .enumerate()
            .map(|(i, g)| verdict(&g.ranks, dumps, &calls[i], &p2p[i]))
            .collect();
        Ok(Analysis {
            groups,
            calls,
            p2p,
            verdicts,
            dumped: dumps.keys().copied().collect(),
        })
    }

    /// Group `i`'s report: through the groups its skipping ranks wait in when they all wait
    /// behind another rank (Note [Waiting behind another group]), else its own verdict.
    pub(super) fn text(&self, i: usize) -> String {
        self.behind_another_group(i)
            .unwrap_or_else(|| self.verdicts[i].text.clone())
    }

    /// The report of group `i` through the groups its skipping ranks wait in; `None` unless
    /// every one of them waits behind another rank.
    pub(super) fn behind_another_group(&self, i: usize) -> Option<String> {
        let skipped = self.verdicts[i].skipped.as_ref()?;
        let (roots, via) = self.roots_behind(i, &BTreeSet::from([i]))?;
        // Led back to a rank of this very group (collectives issued in different orders,
        // each group waiting for the other): a deadlock, not somebody else's fault; the
        // group's own verdict says what it saw.
        if self.leads_back(i, &roots) {
            return None;
        }
        let verb = |rs: &[usize]| if rs.len() == 1 { "waits" } else { "wait" };
        Some(format!(
            "{}\n  culprit: {}, behind which {} {} in another group: {} never issued {} that {} \
             {} in ({})",
            skipped.head,
            ranks_word(&roots.into_iter().collect::<Vec<_>>()),
            ranks_word(&skipped.absent),
            verb(&skipped.absent),
            ranks_word(&skipped.absent),
            skipped.call,
            ranks_word(&skipped.present),
            verb(&skipped.present),
            via.join("; ")
        ))
    }

    /// Whether `roots`, found behind group `i`'s skipping ranks, are ranks that group names
    /// as skipping or waiting: a chain back into it.
    fn leads_back(&self, i: usize, roots: &BTreeSet<usize>) -> bool {
        let Some(skipped) = self.verdicts[i].skipped.as_ref() else {
            return false;
        };
        roots
            .iter()
            .any(|r| skipped.present.contains(r) || skipped.absent.contains(r))
    }

    /// Whether rank `r` waits point-to-point in group `j` of two ranks, where its peer can
    /// only be the other one (Note [Point-to-point waits]).
    fn waits_in_pair(&self, j: usize, r: usize) -> bool {
        self.groups[j].ranks.len() == 2 && self.p2p[j].contains_key(&r)
    }

    /// "group 3 (ranks [2, 3])".
    fn group(&self, j: usize) -> String {
        let g = &self.groups[j];
        format!("group {} (ranks [{}])", g.name, join(g.ranks.iter()))
    }

    /// The culprits behind group `i`'s skipping ranks, and where each of them waits; `None`
    /// unless every one waits in another group (not in `seen`) that names other ranks, or, with
    /// nothing of its own under way, shares one with a rank that wrote no dump.
    fn roots_behind(
        &self,
        i: usize,
        seen: &BTreeSet<usize>,
    ) -> Option<(BTreeSet<usize>, Vec<String>)> {
        let (groups, calls, verdicts, dumped) =
            (&self.groups, &self.calls, &self.verdicts, &self.dumped);
        let skipped = verdicts[i].skipped.as_ref()?;
        let mut roots = BTreeSet::new();
        let mut via = Vec::new();
        for &r in &skipped.absent {
            // The other group where `r` waits, unfinished, and is not what that group names.
            let waits = (0..groups.len()).find_map(|j| {
                let (seq, call) = calls[j].get(&r)?.iter().next_back()?;
                let elsewhere = !seen.contains(&j) && !call.done;
                let names_another =
                    !verdicts[j].culprits.is_empty() && !verdicts[j].culprits.contains(&r);
                (elsewhere && names_another).then_some((j, *seq, call))
            });
            let Some((j, seq, call)) = waits else {
                // No collective of its own under way (it waits in a send or receive, or between
                // two collectives): the ranks without a dump that share a group with it.
                // The group it waits in point-to-point, else the smallest such group: the
                // world holds every rank, a subgroup says more (Note [Point-to-point waits]).
                let (j, silent) = (0..groups.len())
                    .filter_map(|j| {
                        let g = &groups[j];
                        let silent: Vec<usize> = g
                            .ranks
                            .iter()
                            .copied()
                            .filter(|q| !dumped.contains(q))
                            .collect();
                        (!seen.contains(&j) && g.ranks.contains(&r) && !silent.is_empty())
                            .then_some((j, silent))
                    })
                    .min_by_key(|(j, _)| (!self.waits_in_pair(*j, r), groups[*j].ranks.len()))?;
                via.push(
                    match self.p2p[j].get(&r).filter(|_| self.waits_in_pair(j, r)) {
                        Some(op) => format!(
                        "rank {r} waits in a point-to-point {} of {} with {}, which wrote no dump",
                        op.op,
                        self.group(j),
                        ranks_word(&silent)
                    ),
                        None => format!(
                            "rank {r} shares {} with {}, which wrote no dump",
                            self.group(j),
                            ranks_word(&silent)
                        ),
                    },
                );
                roots.extend(silent);
                continue;
            };
            // Each branch follows its own path: two ranks may wait in one group.
            let mut path = seen.clone();
            path.insert(j);
            // A chain that leads back into group j (groups waiting for each other, deeper
            // down) stops at j's own verdict, as at the top (`behind_another_group`).
            let deeper = self
                .roots_behind(j, &path)
                .filter(|(roots, _)| !self.leads_back(j, roots));
            let behind: Vec<usize> = match deeper {
                Some((deeper_roots, deeper_via)) => {
                    via.extend(deeper_via);
                    deeper_roots.into_iter().collect()
                }
                None => verdicts[j].culprits.clone(),
            };
            via.push(format!(
                "rank {r} waits in {} of {} for {}",
                call.describe(seq),
                self.group(j),
                ranks_word(&behind)
            ));
            roots.extend(behind);
        }
        Some((roots, via))
    }
}

pub(super) fn join<'a>(it: impl Iterator<Item = &'a usize>) -> String {
    it.map(usize::to_string).collect::<Vec<_>>().join(", ")
}

/// `rank 2` or `ranks 0, 1`.
pub(super) fn ranks_word(rs: &[usize]) -> String {
    if rs.len() == 1 {
        format!("rank {}", rs[0])
    } else {
        format!("ranks {}", join(rs.iter()))
    }
}
