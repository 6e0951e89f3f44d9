//! The verdicts on dumps written here: one group, subgroups matched by their ranks, and
//! ranks that wait behind another group.
use std::collections::BTreeMap;

use phalanx_pg::flight_recorder::pickle::Value;

use super::groups::groups;
use super::verdict::{calls_of, p2p_of, verdict, Analysis};

/// A dump of group "0" over `ranks` holding `calls` (sequence number, op, count, state).
fn dump(ranks: &str, cfg_key: &str, calls: &[(i64, &str, i64, &str)]) -> Value {
    dump_groups(&[(cfg_key, ranks)], "0", calls)
}

/// A dump of the groups `(name, ranks)`, holding `calls` of group `of`.
fn dump_groups(groups: &[(&str, &str)], of: &str, calls: &[(i64, &str, i64, &str)]) -> Value {
    dump_in(groups, &[(of, calls)])
}

/// Calls as a test writes them: (sequence number, op, count, state).
type Calls<'a> = &'a [(i64, &'a str, i64, &'a str)];

/// A dump of the groups `(name, ranks)`, holding the calls of each group named.
fn dump_in(groups: &[(&str, &str)], calls: &[(&str, Calls<'_>)]) -> Value {
    let s = |t: &str| Value::from(t);
    let entries = calls
        .iter()
        .flat_map(|&(of, calls)| calls.iter().map(move |c| (of, c)))
        .map(|(of, &(seq, op, n, state))| {
            Value::Dict(vec![
                (
                    s("process_group"),
                    Value::Tuple(vec![s(of), s("default_pg")]),
                ),
                (s("collective_seq_id"), Value::Int(seq)),
                (
                    s("is_p2p"),
                    Value::Bool(
                        op == "coalesced" || op.starts_with("send") || op.starts_with("recv"),
                    ),
                ),
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
    verdict(
        &g.ranks,
        &dumps,
        &calls_of(&dumps, &g.names),
        &p2p_of(&dumps, &g.names),
    )
    .text
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
    let names = &pair.names;
    let r = verdict(
        &pair.ranks,
        &dumps,
        &calls_of(&dumps, names),
        &p2p_of(&dumps, names),
    )
    .text;
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

/// Note [Waiting behind another group]: a cut model's rank 3 stopped; its tensor-parallel
/// partner rank 2 waits for it in their group, so it never issues the world's collective
/// that ranks 0 and 1 wait in. The world's report names rank 3, through rank 2.
#[test]
fn a_rank_waiting_behind_another_group_leads_to_that_groups_culprit() {
    let world = ("0", "[0, 1, 2, 3]");
    let gather = [(0, "all_gather", 1, "started")];
    let tp = [
        (4, "all_reduce", 8, "completed"),
        (5, "all_reduce", 8, "started"),
    ];
    let done = [(5, "all_reduce", 8, "completed")];
    let dumps = BTreeMap::from([
        (
            0,
            dump_in(&[world, ("1", "[0, 1]")], &[("0", &gather), ("1", &done)]),
        ),
        (
            1,
            dump_in(&[world, ("1", "[0, 1]")], &[("0", &gather), ("1", &done)]),
        ),
        (2, dump_in(&[world, ("1", "[2, 3]")], &[("1", &tp)])),
    ]);
    let a = Analysis::new(&dumps).unwrap();
    let at = a
        .groups
        .iter()
        .position(|g| g.ranks == [0, 1, 2, 3])
        .unwrap();
    assert!(a.verdicts[at].text.contains("culprit: rank 2 never issued"));
    let r = a.text(at);
    assert!(
        r.contains("culprit: rank 3, behind which rank 2 waits in another group: rank 2 never issued #0 all_gather")
            && r.contains("(rank 2 waits in #5 all_reduce [[8]] ['Float'] of group 1 (ranks [2, 3]) for rank 3)"),
        "{r}"
    );
    // Where the waiting rank's group names nobody (every dump there), the plain verdict.
    let pair = a.groups.iter().position(|g| g.ranks == [0, 1]).unwrap();
    assert!(a.behind_another_group(pair).is_none());
}

/// Rank 2 has nothing of its own under way (it waits in a pipeline's receive, say), and
/// shares a group with rank 3, which wrote no dump: rank 3 is named, through rank 2. With
/// every rank's dump there, nobody is blamed through a group.
#[test]
fn a_rank_with_nothing_under_way_beside_a_silent_rank_leads_to_it() {
    let world = ("0", "[0, 1, 2, 3]");
    let gather = [(0, "all_gather", 1, "started")];
    let done = [(5, "all_reduce", 8, "completed")];
    let mut dumps = BTreeMap::from([
        (
            0,
            dump_in(&[world, ("1", "[0, 1]")], &[("0", &gather), ("1", &done)]),
        ),
        (
            1,
            dump_in(&[world, ("1", "[0, 1]")], &[("0", &gather), ("1", &done)]),
        ),
        (2, dump_in(&[world, ("1", "[2, 3]")], &[("1", &done)])),
    ]);
    let verdict_of_world = |dumps: &BTreeMap<usize, Value>| {
        let a = Analysis::new(dumps).unwrap();
        let at = a
            .groups
            .iter()
            .position(|g| g.ranks == [0, 1, 2, 3])
            .unwrap();
        a.behind_another_group(at)
    };
    let r = verdict_of_world(&dumps).unwrap();
    assert!(
        r.contains("culprit: rank 3, behind which rank 2 waits")
            && r.contains(
                "(rank 2 shares group 1 (ranks [2, 3]) with rank 3, which wrote no dump)"
            ),
        "{r}"
    );
    dumps.insert(3, dump_in(&[world, ("1", "[2, 3]")], &[("1", &done)]));
    assert_eq!(verdict_of_world(&dumps), None);
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

/// Two groups each waiting for the other (rank 0 waits in the world's all-gather, rank 2 in
/// their pair's #3, which rank 0 never issued): the chain leads back into the world group, so
/// nobody is named through it, and each group's own verdict stands.
#[test]
fn groups_waiting_for_each_other_name_nobody_through_each_other() {
    let world = ("0", "[0, 1, 2]");
    let gather = [(0, "all_gather", 1, "started")];
    let pair_0 = [(2, "all_reduce", 8, "completed")];
    let pair_2 = [
        (2, "all_reduce", 8, "completed"),
        (3, "all_reduce", 8, "started"),
    ];
    let dumps = BTreeMap::from([
        (
            0,
            dump_in(&[world, ("1", "[0, 2]")], &[("0", &gather), ("1", &pair_0)]),
        ),
        (1, dump_in(&[world], &[("0", &gather)])),
        (2, dump_in(&[world, ("1", "[0, 2]")], &[("1", &pair_2)])),
    ]);
    let a = Analysis::new(&dumps).unwrap();
    let at = a.groups.iter().position(|g| g.ranks == [0, 1, 2]).unwrap();
    assert!(a.behind_another_group(at).is_none());
    assert!(a
        .text(at)
        .contains("culprit: rank 2 never issued #0 all_gather"));
}

/// A rank with nothing under way shares the world and a pair with a rank that wrote no dump:
/// the pair is named (the smallest group), and so is only the silent rank of that pair.
#[test]
fn a_silent_rank_is_named_through_the_smallest_group_shared() {
    let world = ("0", "[0, 1, 2, 3]");
    let gather = [(0, "all_gather", 1, "started")];
    let done = [(5, "all_reduce", 8, "completed")];
    let dumps = BTreeMap::from([
        (0, dump_in(&[world, ("1", "[0, 1, 2]")], &[("1", &gather)])),
        (1, dump_in(&[world, ("1", "[0, 1, 2]")], &[("1", &gather)])),
        (
            2,
            dump_in(
                &[world, ("1", "[0, 1, 2]"), ("2", "[2, 3]")],
                &[("2", &done)],
            ),
        ),
    ]);
    let a = Analysis::new(&dumps).unwrap();
    let at = a.groups.iter().position(|g| g.ranks == [0, 1, 2]).unwrap();
    let r = a.text(at);
    assert!(
        r.contains("culprit: rank 3, behind which rank 2 waits")
            && r.contains(
                "(rank 2 shares group 2 (ranks [2, 3]) with rank 3, which wrote no dump)"
            ),
        "{r}"
    );
}

/// Rank 2 wrote no dump, but nobody in the group waits for it: it is not blamed here (it may
/// have ended before writing one when the job stopped).
#[test]
fn a_missing_dump_nobody_waits_for_names_nobody() {
    let calls = [(4, "all_reduce", 8, "completed")];
    let dumps = BTreeMap::from([
        (0, dump("[0, 1, 2]", "0", &calls)),
        (1, dump("[0, 1, 2]", "0", &calls)),
    ]);
    let r = report(dumps);
    assert!(
        r.contains("no dump from rank 2 (stopped, hung, killed, or ended before writing one)")
            && !r.contains("culprit"),
        "{r}"
    );
}

/// Note [Point-to-point waits]: a pipeline's rank 3 stopped. Its stage peer rank 1 failed in
/// their send and receive, so it never issued the all-reduce its tensor-parallel partner
/// rank 0 waits in; rank 3's own partner rank 2 has nothing under way. The pair of ranks 1
/// and 3 names rank 3 from rank 1's unfinished exchange, and the pair of ranks 0 and 1 names it
/// through rank 1.
#[test]
fn a_rank_waiting_point_to_point_in_a_pair_names_its_silent_peer() {
    let tp_0 = [
        (0, "all_reduce", 8, "completed"),
        (1, "all_reduce", 8, "started"),
    ];
    let tp_1 = [(0, "all_reduce", 8, "completed")];
    let exchange = [(0, "coalesced", 16, "started")];
    let dumps = BTreeMap::from([
        (0, dump_in(&[("1", "[0, 1]")], &[("1", &tp_0)])),
        (
            1,
            dump_in(
                &[("1", "[0, 1]"), ("2", "[1, 3]")],
                &[("1", &tp_1), ("2", &exchange)],
            ),
        ),
        (2, dump_in(&[("1", "[2, 3]")], &[("1", &tp_1)])),
    ]);
    let a = Analysis::new(&dumps).unwrap();
    let at = |ranks: [usize; 2]| a.groups.iter().position(|g| g.ranks == ranks).unwrap();
    let stage = a.text(at([1, 3]));
    assert!(
        stage.ends_with(
            "culprit: rank 3 wrote no dump (stopped, hung or killed) while rank 1 waits in a \
             point-to-point coalesced (started) with it"
        ),
        "{stage}"
    );
    let tp = a.text(at([0, 1]));
    assert!(
        tp.contains("culprit: rank 3, behind which rank 1 waits in another group")
            && tp.contains("rank 1 waits in a point-to-point coalesced of group")
            && tp.contains("(ranks [1, 3]) with rank 3, which wrote no dump"),
        "{tp}"
    );
    // Rank 3's partner waits for nobody: no evidence there.
    assert!(a.text(at([2, 3])).contains("nobody here waits for it"));
    // Both ends dumped: the wait is reported, and nobody named.
    let mut both = dumps.clone();
    both.insert(3, dump_in(&[("2", "[1, 3]")], &[("2", &exchange)]));
    let a = Analysis::new(&both).unwrap();
    let pair = a.groups.iter().position(|g| g.ranks == [1, 3]).unwrap();
    assert!(
        a.text(pair)
            .ends_with("ranks 1, 3 wait in a point-to-point coalesced (started), with a rank that wrote its dump"),
        "{}",
        a.text(pair)
    );
}
