//! The elastic side of the agents: rounds of whichever nodes are there (`--nnodes MIN:MAX`,
//! this file: `Membership`), the admission of a node into a running round (`admission`:
//! `Nodes`), and what every agent keeps of the others while a round runs: members,
//! heartbeats, failures, the exit barrier (`coordinate`: `Coordinator`). Each type owns its
//! state; the children never import this parent.
//!
//! Elastic rendezvous (`--nnodes MIN:MAX`): each round is made of whichever nodes are there.
//!
//! Note [Elastic rounds]
//! Keys, besides the static rounds' `agent/<r>/node/<g>` claims and `agent/<r>/joined` counter
//! (`rdzv/claims/`):
//! - `agent/elastic/round`: the newest round any agent has joined;
//! - `agent/<r>/members`: round `r`'s outcome, `members 0:2 2:1` (node rank : workers), written
//!   by the round's closer, with ` admits` at the end under `--fault-tolerance` (the round
//!   admits arriving nodes: Note [Node admission]);
//! - `agent/<r>/closer`: the node rank that closes round `r` where the store has no host (etcd).
//!
//! An agent joins the newest round unless that round is closed already, in which case it joins
//! the next one. Joining the next round is also how a running job learns that a node is waiting:
//! every agent of the running round checks the next round's `joined` counter at each monitor
//! tick and, when it moves, stops its workers and joins too (scale up). A round that ends in a
//! failure sends its surviving agents to the next round the same way; a node that is gone does
//! not join it (scale down). Workers restart from the job's newest checkpoint at the new world
//! size.
//!
//! One agent closes each round: once MIN nodes are in, it waits `--rdzv-last-call` for more (or
//! until MAX are in) and writes the members. An agent that joined after the close is not among
//! them and goes on to the next round. Which agent closes:
//! - under `static` and `c10d`, node 0: it hosts the store, so it is in every round, and losing
//!   it ends the job, as losing torchrun's rendezvous host does;
//! - under `etcd` the store has no host, and the round's first agent in closes it (it takes
//!   `agent/<r>/closer`). So after node 0 is lost, `--max-restarts` forms the next round of
//!   whoever is left (Note [No node is special] in `policy.rs`).
//!
//! Under `--fault-tolerance` an agent that finds the newest round closed asks to be admitted
//! into it instead (Note [Node admission] in `admission.rs`): nobody restarts.

pub(crate) mod admission;
pub(crate) mod coordinate;
pub(crate) mod departures;
pub(crate) mod links;
pub(crate) mod policy;

use std::time::{Duration, Instant};

use phalanx_store::{keys, Store};

use crate::rdzv::claims::{claim_node, read_claim, store_err, Claim};
use crate::worker_env::Layout;
use crate::Error;
use admission::{Admitted, Arrival};
pub(crate) use policy::Rules;

/// The newest round any agent has joined (Note [Elastic rounds]).
const NEWEST_ROUND: &str = "agent/elastic/round";
/// How often the closer counts the agents in an open round.
const POLL: Duration = Duration::from_millis(50);
/// Counts the nodes that read a `mismatch` outcome; the closer waits for them (at most
/// [`MISMATCH_WAIT`]) before it exits, taking the store with it when it hosts it.
const MISMATCH_READ: &str = "mismatch_read";
const MISMATCH_WAIT: Duration = Duration::from_secs(2);
/// Round `r`'s closer where the store has no host (Note [Elastic rounds]).
const CLOSER: &str = "closer";

/// This node's place in an elastic round.
#[derive(Debug)]
pub(crate) struct Membership {
    /// The round joined.
    pub(crate) round: u32,
    /// This node's ranks in it.
    pub(crate) layout: Layout,
    /// The node ranks in the round, ascending (admitted into a running round: the nodes
    /// alive in it).
    pub(crate) members: Vec<u32>,
    /// Admitted into a running round (Note [Node admission]): its place there.
    pub(crate) admitted: Option<Admitted>,
}

/// Joins the newest open round (Note [Elastic rounds]) as node `group_rank`, starting the
/// search at round `from`; returns the round and this node's layout once the round's closer
/// has closed it with this node in. `None` when `interrupted` (the agent's signal check) says so.
pub(crate) fn join(
    store: &dyn Store,
    from: u32,
    group_rank: u32,
    claim: &Claim,
    rules: &Rules,
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<Option<Membership>, Error> {
    let start = Instant::now();
    let mut round = newest_round(store)?.max(from);
    loop {
        if let Some(Closed {
            members: first,
            admits,
        }) = outcome(store, round)?
        {
            // Both sides must agree on how an arriving node joins.
            if admits != rules.fault_tolerance {
                let (theirs, mine) = match admits {
                    true => ("with", "without"),
                    false => ("without", "with"),
                };
                return Err(Error::NotAdmitted {
                    node_rank: group_rank,
                    round,
                    reason: format!(
                        "node {} runs it {theirs} --fault-tolerance and this node was started \
                         {mine} it; start every node with the same flags",
                        closer_of(store, round)?.unwrap_or(0)
                    ),
                });
            }
            if admits {
                let mut moved = || Ok(newest_round(store)? > round);
                let request = admission::Request {
                    round,
                    group_rank,
                    claim,
                    first: &first,
                };
                let arrival =
                    admission::arrive(store, &request, rules.timeout, &mut moved, interrupted)?;
                match arrival {
                    Arrival::Admitted(a) => {
                        let sizes: Vec<u32> = a.nodes.iter().map(|&(_, n)| n).collect();
                        return Ok(Some(Membership {
                            round,
                            layout: Layout::from_sizes(sizes.len() as u32 - 1, &sizes),
                            members: a.live.clone(),
                            admitted: Some(a),
                        }));
                    }
                    Arrival::Moved => {
                        round = newest_round(store)?;
                        continue;
                    }
                    Arrival::Interrupted => return Ok(None),
                }
            }
            round += 1;
            continue;
        }
        claim_node(store, round, group_rank, claim)?;
        advance_newest(store, round)?;
        let joined = keys::agent(round, "joined");
        store
            .add(&joined, 1)
            .map_err(|e| store_err("add", &joined, e))?;
        let closer = match rules.store_host {
            Some(host) => host,
            None => take_closer(store, round, group_rank)?,
        };
        let members = match closer == group_rank {
            true => close(store, round, closer, claim, rules, interrupted)?,
            false => wait_outcome(store, round, closer, rules.timeout, start, interrupted)?,
        };
        let Some(members) = members else {
            return Ok(None);
        };
        if let Some(at) = members.iter().position(|&(g, _)| g == group_rank) {
            let sizes: Vec<u32> = members.iter().map(|&(_, n)| n).collect();
            return Ok(Some(Membership {
                round,
                layout: Layout::from_sizes(at as u32, &sizes),
                members: members.iter().map(|&(g, _)| g).collect(),
                admitted: None,
            }));
        }
        // Joined after the round closed: the next one admits this node.
        round += 1;
    }
}

fn newest_round(store: &dyn Store) -> Result<u32, Error> {
    let n = store
        .add(NEWEST_ROUND, 0)
        .map_err(|e| store_err("add", NEWEST_ROUND, e))?;
    Ok(u32::try_from(n).unwrap_or(0))
}

/// Raises the newest round to at least `round`.
fn advance_newest(store: &dyn Store, round: u32) -> Result<(), Error> {
    loop {
        let now = newest_round(store)?;
        if now >= round {
            return Ok(());
        }
        // The counter holds a decimal string (`add`); compare_set moves it only from `now`.
        let (old, new) = (now.to_string(), round.to_string());
        let got = store
            .compare_set(NEWEST_ROUND, old.as_bytes(), new.as_bytes())
            .map_err(|e| store_err("compare_set", NEWEST_ROUND, e))?;
        if got == new.as_bytes() {
            return Ok(());
        }
    }
}

/// The node rank that closes round `round` where the store has no host: the first agent
/// in takes it (Note [Elastic rounds]).
fn take_closer(store: &dyn Store, round: u32, group_rank: u32) -> Result<u32, Error> {
    let k = keys::agent(round, CLOSER);
    let got = store
        .compare_set(&k, b"", group_rank.to_string().as_bytes())
        .map_err(|e| store_err("compare_set", &k, e))?;
    parse_closer(&k, &got)
}

/// Round `round`'s closer, if one took it (`None` where the store's host closes).
fn closer_of(store: &dyn Store, round: u32) -> Result<Option<u32>, Error> {
    let k = keys::agent(round, CLOSER);
    if !store.check(&[&k]).map_err(|e| store_err("check", &k, e))? {
        return Ok(None);
    }
    let got = store.get(&k).map_err(|e| store_err("get", &k, e))?;
    parse_closer(&k, &got).map(Some)
}

fn parse_closer(k: &str, got: &[u8]) -> Result<u32, Error> {
    std::str::from_utf8(got)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| Error::Store {
            op: "elastic rendezvous",
            key: k.to_string(),
            reason: format!("unreadable closer {:?}", String::from_utf8_lossy(got)),
        })
}

/// A round as its closer closed it.
struct Closed {
    /// (node rank, workers), ascending.
    members: Vec<(u32, u32)>,
    /// It admits arriving nodes (`--fault-tolerance`: Note [Node admission]).
    admits: bool,
}

/// Round `round`'s outcome, if its closer has closed it.
fn outcome(store: &dyn Store, round: u32) -> Result<Option<Closed>, Error> {
    let k = keys::agent(round, "members");
    if !store.check(&[&k]).map_err(|e| store_err("check", &k, e))? {
        return Ok(None);
    }
    let text = store.get(&k).map_err(|e| store_err("get", &k, e))?;
    parse_members(&text).map(Some).ok_or_else(|| Error::Store {
        op: "elastic rendezvous",
        key: k,
        reason: format!("unreadable outcome {:?}", String::from_utf8_lossy(&text)),
    })
}

/// The closer: waits for MIN agents, then `last_call` for more (or MAX), and publishes the
/// members.
/// A node started with another `--nnodes` is refused by name.
fn close(
    store: &dyn Store,
    round: u32,
    closer: u32,
    mine: &Claim,
    rules: &Rules,
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<Option<Vec<(u32, u32)>>, Error> {
    let Rules {
        nnodes,
        last_call,
        timeout,
        ..
    } = *rules;
    let start = Instant::now();
    let joined_key = keys::agent(round, "joined");
    let mut min_reached: Option<Instant> = None;
    loop {
        let joined = store
            .add(&joined_key, 0)
            .map_err(|e| store_err("add", &joined_key, e))?;
        let joined = u32::try_from(joined).unwrap_or(0);
        if joined >= nnodes.max {
            break;
        }
        if joined >= nnodes.min {
            let since = *min_reached.get_or_insert_with(Instant::now);
            if since.elapsed() >= last_call {
                break;
            }
        }
        if interrupted() {
            return Ok(None);
        }
        if start.elapsed() >= timeout {
            return Err(Error::ElasticTimeout {
                round,
                joined,
                min: nnodes.min,
                members: claims(store, round, nnodes.max)?
                    .into_iter()
                    .map(|(g, _)| g)
                    .collect(),
                waited_s: start.elapsed().as_secs_f64(),
            });
        }
        std::thread::sleep(POLL);
    }
    let claims = claims(store, round, nnodes.max)?;
    let k = keys::agent(round, "members");
    if let Some((g, c)) = claims
        .iter()
        .find(|(_, c)| c.nnodes != mine.nnodes || c.min_nnodes != mine.min_nnodes)
    {
        let text = format!("mismatch {g} {}:{}", c.min_nnodes, c.nnodes);
        store
            .compare_set(&k, b"", text.as_bytes())
            .map_err(|e| store_err("compare_set", &k, e))?;
        // This agent is about to exit, taking the store with it when it hosts it: let the
        // others read why first.
        let read = keys::agent(round, MISMATCH_READ);
        let deadline = Instant::now() + MISMATCH_WAIT;
        while Instant::now() < deadline {
            match store.add(&read, 0) {
                Ok(n) if n + 1 < claims.len() as i64 => std::thread::sleep(POLL / 5),
                _ => break,
            }
        }
        return Err(Error::InconsistentNnodes {
            node_rank: *g,
            theirs: span(c),
            mine_rank: closer,
            mine: nnodes.to_string(),
        });
    }
    let members: Vec<(u32, u32)> = claims.iter().map(|(g, c)| (*g, c.nproc)).collect();
    let text = format!(
        "members {}{}",
        members
            .iter()
            .map(|(g, n)| format!("{g}:{n}"))
            .collect::<Vec<_>>()
            .join(" "),
        if rules.fault_tolerance { " admits" } else { "" }
    );
    store
        .compare_set(&k, b"", text.as_bytes())
        .map_err(|e| store_err("compare_set", &k, e))?;
    Ok(Some(members))
}

/// `--nnodes` as the claim's node gave it.
fn span(c: &Claim) -> String {
    match c.min_nnodes {
        0 => c.nnodes.to_string(),
        min if min == c.nnodes => min.to_string(),
        min => format!("{min}:{}", c.nnodes),
    }
}

/// Every claim in round `round`, by node rank.
fn claims(store: &dyn Store, round: u32, max: u32) -> Result<Vec<(u32, Claim)>, Error> {
    let mut out = Vec::new();
    for g in 0..max {
        let k = keys::agent(round, &format!("node/{g}"));
        if store.check(&[&k]).map_err(|e| store_err("check", &k, e))? {
            out.push((g, read_claim(store, &k)?));
        }
    }
    Ok(out)
}

/// Any node but the closer: waits for `closer` to close round `round`.
fn wait_outcome(
    store: &dyn Store,
    round: u32,
    closer: u32,
    timeout: Duration,
    start: Instant,
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<Option<Vec<(u32, u32)>>, Error> {
    let k = keys::agent(round, "members");
    loop {
        match store.wait_timeout(&[&k], Duration::from_millis(200)) {
            Ok(()) => break,
            Err(phalanx_store::Error::Timeout { .. }) => {}
            Err(e) => return Err(store_err("wait", &k, e)),
        }
        if interrupted() {
            return Ok(None);
        }
        if start.elapsed() >= timeout {
            return Err(Error::RendezvousTimeout {
                round,
                missing: vec![closer],
                nnodes: 1,
                waited_s: start.elapsed().as_secs_f64(),
            });
        }
    }
    let text = store.get(&k).map_err(|e| store_err("get", &k, e))?;
    if let Some(rest) = text.strip_prefix(b"mismatch ") {
        // The closer keeps its store up until every node has read this.
        let _ = store.add(&keys::agent(round, MISMATCH_READ), 1);
        let rest = String::from_utf8_lossy(rest).into_owned();
        let (g, theirs) = rest.split_once(' ').unwrap_or(("?", "?"));
        return Err(Error::InconsistentNnodes {
            node_rank: g.parse().unwrap_or(u32::MAX),
            theirs: theirs.to_string(),
            mine_rank: closer,
            mine: format!("node {closer}'s"),
        });
    }
    parse_members(&text)
        .map(|closed| Some(closed.members))
        .ok_or_else(|| Error::Store {
            op: "elastic rendezvous",
            key: k,
            reason: format!("unreadable outcome {:?}", String::from_utf8_lossy(&text)),
        })
}

/// An outcome's text: its members, and whether the round admits arriving nodes.
fn parse_members(text: &[u8]) -> Option<Closed> {
    let text = std::str::from_utf8(text).ok()?.strip_prefix("members ")?;
    let (text, admits) = match text.strip_suffix(" admits") {
        Some(t) => (t, true),
        None => (text, false),
    };
    let members = text
        .split(' ')
        .map(|m| {
            let (g, n) = m.split_once(':')?;
            Some((g.parse().ok()?, n.parse().ok()?))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Closed { members, admits })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use phalanx_store::HashStore;

    use super::*;
    use crate::args::Nnodes;

    fn claim(nproc: u32, min: u32, max: u32) -> Claim {
        Claim {
            nproc,
            nnodes: max,
            min_nnodes: min,
            nonce: format!("n{nproc}"),
            host: "h".into(),
            program: "train.py --epochs 3".into(),
        }
    }

    fn join_on(store: &Arc<HashStore>, from: u32, g: u32, c: Claim) -> Result<Membership, Error> {
        let rules = Rules {
            nnodes: Nnodes {
                min: c.min_nnodes,
                max: c.nnodes,
            },
            last_call: Duration::from_millis(300),
            timeout: Duration::from_secs(10),
            fault_tolerance: false,
            goes_on_if_told: false,
            store_host: Some(0),
        };
        join(&**store, from, g, &c, &rules, &mut || false).map(|m| m.expect("not interrupted"))
    }

    #[test]
    fn a_round_starts_with_min_after_the_last_call_and_a_late_node_gets_the_next() {
        let store = Arc::new(HashStore::default());
        let s = store.clone();
        let n2 = std::thread::spawn(move || join_on(&s, 0, 2, claim(2, 2, 3)));
        let m0 = join_on(&store, 0, 0, claim(1, 2, 3)).unwrap();
        let m2 = n2.join().unwrap().unwrap();
        assert_eq!((m0.round, m2.round), (0, 0));
        assert_eq!(m0.members, vec![0, 2]);
        assert_eq!((m2.layout.group_rank, m2.layout.base_rank), (1, 1));
        assert_eq!(m2.layout.world_size, 3);
        // Node 1 arrives while round 0 runs: it joins round 1, which the others see.
        let s = store.clone();
        let n1 = std::thread::spawn(move || join_on(&s, 0, 1, claim(1, 2, 3)));
        while !crate::rdzv::claims::someone_waiting(&*store, 1) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let s = store.clone();
        let n2 = std::thread::spawn(move || join_on(&s, 1, 2, claim(2, 2, 3)));
        let m0 = join_on(&store, 1, 0, claim(1, 2, 3)).unwrap();
        let (m1, m2) = (n1.join().unwrap().unwrap(), n2.join().unwrap().unwrap());
        assert_eq!((m0.round, m1.round, m2.round), (1, 1, 1));
        assert_eq!(m1.members, vec![0, 1, 2]);
        assert_eq!((m1.layout.base_rank, m2.layout.base_rank), (1, 2));
        assert_eq!(m2.layout.world_size, 4);
    }

    #[test]
    fn without_a_store_host_the_first_agent_in_closes_and_node_0_need_not_come() {
        // Under etcd (no store host): node 0 was lost, nodes 1 and 2 meet in round 3.
        let store = Arc::new(HashStore::default());
        let rules = Rules {
            nnodes: Nnodes { min: 2, max: 3 },
            last_call: Duration::from_millis(100),
            timeout: Duration::from_secs(10),
            fault_tolerance: false,
            goes_on_if_told: false,
            store_host: None,
        };
        let s = store.clone();
        let c = claim(1, 2, 3);
        let n2 = std::thread::spawn(move || join(&*s, 3, 2, &c, &rules, &mut || false));
        let m1 = join(&*store, 3, 1, &claim(1, 2, 3), &rules, &mut || false)
            .unwrap()
            .expect("not interrupted");
        let m2 = n2.join().unwrap().unwrap().expect("not interrupted");
        assert_eq!((m1.round, m2.round), (3, 3));
        assert_eq!((m1.members.clone(), m2.members), (vec![1, 2], vec![1, 2]));
        assert_eq!(m1.layout.world_size, 2);
        let closer = closer_of(&*store, 3).unwrap().expect("a closer");
        assert!([1, 2].contains(&closer), "{closer}");
    }

    #[test]
    fn an_arriving_node_with_other_fault_tolerance_flags_is_named() {
        for node0_ft in [true, false] {
            let store = HashStore::default();
            let c = claim(1, 1, 2);
            let rules = |ft| Rules {
                nnodes: Nnodes { min: 1, max: 2 },
                last_call: Duration::ZERO,
                timeout: Duration::from_secs(5),
                fault_tolerance: ft,
                goes_on_if_told: false,
                store_host: Some(0),
            };
            let m0 = join(&store, 0, 0, &c, &rules(node0_ft), &mut || false).unwrap();
            assert_eq!(m0.expect("not interrupted").members, vec![0]);
            let e = join(&store, 0, 1, &c, &rules(!node0_ft), &mut || false)
                .expect_err("refused")
                .to_string();
            let theirs = if node0_ft { "with" } else { "without" };
            assert!(
                e.contains("node 1 was not admitted into running round 0")
                    && e.contains(&format!("node 0 runs it {theirs} --fault-tolerance")),
                "{e}"
            );
        }
    }

    #[test]
    fn a_node_with_another_range_is_named() {
        let store = Arc::new(HashStore::default());
        let s = store.clone();
        let n1 = std::thread::spawn(move || join_on(&s, 0, 1, claim(1, 1, 2)));
        let e0 = join_on(&store, 0, 0, claim(1, 2, 3))
            .unwrap_err()
            .to_string();
        let e1 = n1.join().unwrap().unwrap_err().to_string();
        assert!(
            e0.contains("node 1") && e0.contains("1:2") && e0.contains("2:3"),
            "{e0}"
        );
        assert!(e1.contains("node 1") && e1.contains("1:2"), "{e1}");
    }

    #[test]
    fn too_few_nodes_time_out_naming_who_is_in() {
        let store = HashStore::default();
        let c = claim(1, 2, 3);
        let e = join(
            &store,
            0,
            0,
            &c,
            &Rules {
                nnodes: Nnodes { min: 2, max: 3 },
                last_call: Duration::ZERO,
                timeout: Duration::from_millis(200),
                fault_tolerance: false,
                goes_on_if_told: false,
                store_host: Some(0),
            },
            &mut || false,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("1 of at least 2") && e.contains("[0]"), "{e}");
    }
}
