//! Each round's meeting of the node agents through the job's store, whatever backend holds
//! it: every node's claim, the round's layout, its failure and exit barrier. A static round
//! waits for every node ([`rendezvous`]); an elastic one for whichever are there (`elastic/`).
//!
//! Keys (all under `agent/<round>/`, apart from the workers' `round/<round>/` prefix):
//! - `node/<g>`: node `g`'s claim, `{nproc, nnodes, nonce, host}`, written with compare_set so
//!   that a second agent claiming the same `--node-rank` sees the first one's claim;
//! - `joined`: how many agents are in; `layout`: the round's outcome, written by the last
//!   agent in (Note [Agent rendezvous traffic]);
//! - `failed`: the round's root cause (first writer wins), polled by every agent;
//! - `rows/<g>`: node `g`'s table rows after a failure;
//! - `done` / `left`: the exit barrier counters.

use std::time::{Duration, Instant};

use phalanx_store::{keys, Store};
use serde::{Deserialize, Serialize};

use crate::worker_env::Layout;
use crate::Error;

/// One agent's entry in a round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Claim {
    pub(crate) nproc: u32,
    pub(crate) nnodes: u32,
    /// `MIN` of an elastic `--nnodes MIN:MAX` (`nnodes` is `MAX`); 0 in a static job.
    #[serde(default)]
    pub(crate) min_nnodes: u32,
    /// Random per agent process: tells two agents with the same node rank apart.
    pub(crate) nonce: String,
    pub(crate) host: String,
    /// The program and its arguments without launch flags, paths reduced to file names
    /// ([`program_signature`]): every node should run the same one ([`warn_other_programs`]).
    #[serde(default)]
    pub(crate) program: String,
}

/// What a node runs, for comparing nodes: the command line with every argument that holds a
/// path reduced to its file name, since the same program may live in other folders on other
/// hosts.
pub(crate) fn program_signature(program: &[std::ffi::OsString]) -> String {
    program
        .iter()
        .map(|a| {
            let a = a.to_string_lossy();
            match a.rsplit_once('/') {
                Some((_, name)) if !a.contains(' ') => name.to_string(),
                _ => a.into_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Warns, on this node's console, about nodes of round `round` that run another program than
/// the round's first node (Note [Elastic rounds] and static rounds alike): that node names
/// every such node, any other node names itself. The first node is node 0 unless it was lost
/// under etcd (Note [No node is special] in `elastic/policy.rs`). A warning, not a refusal: nodes may
/// legitimately differ in an argument (a per-node output file), and torchrun does not compare
/// at all.
pub(crate) fn warn_other_programs(
    store: &dyn Store,
    round: u32,
    members: &[u32],
    me: u32,
    mine: &Claim,
) {
    let first = members.iter().copied().min().unwrap_or(0);
    let program_of = |g: u32| {
        read_claim(store, &keys::agent(round, &format!("node/{g}")))
            .map(|c| c.program)
            .ok()
    };
    let differs =
        |theirs: &str| !theirs.is_empty() && !mine.program.is_empty() && theirs != mine.program;
    if me != first {
        if let Some(theirs) = program_of(first).filter(|t| differs(t)) {
            eprintln!(
                "phalanx launch: warning: this node (node {me}) runs `{}` but node {first} runs \
                 `{theirs}` (compared without launch flags, paths reduced to file names); \
                 every node should run the same program",
                mine.program
            );
        }
        return;
    }
    for &g in members.iter().filter(|&&g| g != first) {
        if let Some(theirs) = program_of(g).filter(|t| differs(t)) {
            eprintln!(
                "phalanx launch: warning: node {g} runs `{theirs}` but this node (node {first}) \
                 runs `{}` (compared without launch flags, paths reduced to file names); every \
                 node should run the same program",
                mine.program
            );
        }
    }
}

/// How long node 0 keeps the store up after finding that another node disagrees on --nnodes.
const MISMATCH_LINGER: Duration = Duration::from_millis(600);

pub(crate) fn store_err(op: &'static str, key: &str, e: phalanx_store::Error) -> Error {
    Error::Store {
        op,
        key: key.to_string(),
        reason: e.to_string(),
    }
}

/// Joins round `round` as node `group_rank` and returns the rank layout once all `claim.nnodes`
/// agents are in. `interrupted` is polled between waits (the agent's signal check).
///
/// Note [Agent rendezvous traffic]: an agent writes its claim, compares `--nnodes` with node
/// 0's claim, and bumps the `joined` counter; the agent whose bump completes the count reads
/// every claim once and publishes the outcome (`layout`: the node sizes, or the first
/// disagreement found). Everyone else waits on that one key, so a round costs O(nnodes) store
/// requests, not O(nnodes²) as polling every claim from every agent would.
pub(crate) fn rendezvous(
    store: &dyn Store,
    round: u32,
    group_rank: u32,
    claim: &Claim,
    timeout: Duration,
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<Option<Layout>, Error> {
    claim_node(store, round, group_rank, claim)?;
    let keys: Vec<String> = (0..claim.nnodes)
        .map(|g| keys::agent(round, &format!("node/{g}")))
        .collect();
    let outcome_key = keys::agent(round, "layout");
    let joined_key = keys::agent(round, "joined");
    let joined = store
        .add(&joined_key, 1)
        .map_err(|e| store_err("add", &joined_key, e))?;
    if joined == i64::from(claim.nnodes) {
        if let Some(outcome) = settle(store, &keys)? {
            store
                .compare_set(&outcome_key, b"", outcome.to_string().as_bytes())
                .map_err(|e| store_err("compare_set", &outcome_key, e))?;
        }
    }
    let start = Instant::now();
    let mut node0_checked = group_rank == 0;
    loop {
        // A node that disagrees with node 0 on --nnodes is an error now, not after the
        // timeout: publish it so every waiting agent reports it too.
        if !node0_checked
            && store
                .check(&[&keys[0]])
                .map_err(|e| store_err("check", &keys[0], e))?
        {
            node0_checked = true;
            let c = read_claim(store, &keys[0])?;
            if c.nnodes != claim.nnodes {
                let m = Outcome::Mismatch([(0, c.nnodes), (group_rank, claim.nnodes)]);
                store
                    .compare_set(&outcome_key, b"", m.to_string().as_bytes())
                    .map_err(|e| store_err("compare_set", &outcome_key, e))?;
            }
        }
        match store.wait_timeout(&[&outcome_key], Duration::from_millis(200)) {
            Ok(()) => break,
            Err(phalanx_store::Error::Timeout { .. }) => {}
            Err(e) => return Err(store_err("wait", &outcome_key, e)),
        }
        if interrupted() {
            return Ok(None);
        }
        if start.elapsed() >= timeout {
            let mut missing = Vec::new();
            for (g, k) in keys.iter().enumerate() {
                if !store.check(&[k]).map_err(|e| store_err("check", k, e))? {
                    missing.push(g as u32);
                }
            }
            return Err(Error::RendezvousTimeout {
                round,
                missing,
                nnodes: claim.nnodes,
                waited_s: start.elapsed().as_secs_f64(),
            });
        }
    }
    let text = store
        .get(&outcome_key)
        .map_err(|e| store_err("get", &outcome_key, e))?;
    match Outcome::parse(&text).ok_or_else(|| Error::Store {
        op: "rendezvous",
        key: outcome_key.clone(),
        reason: format!("unreadable outcome {:?}", String::from_utf8_lossy(&text)),
    })? {
        Outcome::Sizes(sizes) => Ok(Some(Layout::from_sizes(group_rank, &sizes))),
        Outcome::Mismatch(pair) => {
            if group_rank == 0 {
                // This node hosts the store: keep it up a moment so that the other nodes read
                // the outcome and report the mismatch themselves, instead of a lost store.
                std::thread::sleep(MISMATCH_LINGER);
            }
            // Name the other node from this node's point of view.
            let (mine, theirs) = if pair[0].0 == group_rank {
                (pair[0], pair[1])
            } else if pair[1].0 == group_rank {
                (pair[1], pair[0])
            } else {
                (
                    (group_rank, claim.nnodes),
                    if claim.nnodes == pair[0].1 {
                        pair[1]
                    } else {
                        pair[0]
                    },
                )
            };
            Err(Error::InconsistentNnodes {
                node_rank: theirs.0,
                theirs: theirs.1.to_string(),
                mine_rank: mine.0,
                mine: mine.1.to_string(),
            })
        }
    }
}

/// Writes this agent's claim to node `group_rank`'s place in round `round`; a place another
/// agent holds is a duplicate `--node-rank`, named with both hosts.
pub(crate) fn claim_node(
    store: &dyn Store,
    round: u32,
    group_rank: u32,
    claim: &Claim,
) -> Result<(), Error> {
    let mine = serde_json::to_vec(claim).expect("a claim serialises");
    let my_key = keys::agent(round, &format!("node/{group_rank}"));
    let got = store
        .compare_set(&my_key, b"", &mine)
        .map_err(|e| store_err("compare_set", &my_key, e))?;
    if got != mine {
        let other = serde_json::from_slice::<Claim>(&got)
            .map(|c| c.host)
            .unwrap_or_else(|_| "an unknown host".into());
        return Err(Error::DuplicateNodeRank {
            node_rank: group_rank,
            round,
            host: claim.host.clone(),
            other,
        });
    }
    Ok(())
}

/// What the last agent to join publishes under `agent/<round>/layout`.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// `sizes 2 3 1`: nproc of each node, in node order.
    Sizes(Vec<u32>),
    /// `mismatch 0 2 1 3`: node 0 says --nnodes 2, node 1 says 3.
    Mismatch([(u32, u32); 2]),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Sizes(s) => {
                write!(f, "sizes")?;
                s.iter().try_for_each(|n| write!(f, " {n}"))
            }
            Outcome::Mismatch([(a, na), (b, nb)]) => write!(f, "mismatch {a} {na} {b} {nb}"),
        }
    }
}

impl Outcome {
    fn parse(bytes: &[u8]) -> Option<Outcome> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut words = text.split(' ');
        let kind = words.next()?;
        let nums: Vec<u32> = words.map(str::parse).collect::<Result<_, _>>().ok()?;
        match (kind, nums.as_slice()) {
            ("sizes", s) if !s.is_empty() => Some(Outcome::Sizes(nums)),
            ("mismatch", &[a, na, b, nb]) => Some(Outcome::Mismatch([(a, na), (b, nb)])),
            _ => None,
        }
    }
}

/// Reads every claim once (the last agent in) and decides the round. `None` when a claim this
/// agent expects is absent: then an agent counted in `joined` has a node rank beyond this
/// agent's --nnodes, and the comparison with node 0's claim reports the disagreement.
fn settle(store: &dyn Store, keys: &[String]) -> Result<Option<Outcome>, Error> {
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    if !store
        .check(&refs)
        .map_err(|e| store_err("check", refs[0], e))?
    {
        return Ok(None);
    }
    let values = store
        .multi_get(&refs)
        .map_err(|e| store_err("multi_get", refs[0], e))?;
    let mut sizes = Vec::with_capacity(values.len());
    let mut first: Option<(u32, u32)> = None;
    for (g, v) in values.iter().enumerate() {
        let c = parse_claim(&keys[g], v)?;
        match first {
            None => first = Some((g as u32, c.nnodes)),
            Some(f) if f.1 != c.nnodes => {
                return Ok(Some(Outcome::Mismatch([f, (g as u32, c.nnodes)])))
            }
            Some(_) => {}
        }
        sizes.push(c.nproc);
    }
    Ok(Some(Outcome::Sizes(sizes)))
}

pub(crate) fn read_claim(store: &dyn Store, k: &str) -> Result<Claim, Error> {
    parse_claim(k, &store.get(k).map_err(|e| store_err("get", k, e))?)
}

fn parse_claim(k: &str, v: &[u8]) -> Result<Claim, Error> {
    serde_json::from_slice(v).map_err(|e| Error::Store {
        op: "rendezvous",
        key: k.to_string(),
        reason: format!("unreadable claim: {e}"),
    })
}

/// Whether an agent has joined round `round` (the one after a running round): then the
/// running round ends so that everyone meets there (scale up).
pub(crate) fn someone_waiting(store: &dyn Store, round: u32) -> bool {
    store
        .check(&[&keys::agent(round, "joined")])
        .unwrap_or(false)
}

#[cfg(test)]
mod tests;
