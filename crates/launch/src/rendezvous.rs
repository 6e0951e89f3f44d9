//! Static rendezvous of the node agents through the store, one round per (re)start.
//!
//! Keys (all under `agent/<round>/`, apart from the workers' `round/<round>/` prefix):
//! - `node/<g>`: node `g`'s claim, `{nproc, nnodes, nonce, host}`, written with compare_set so
//!   that a second agent claiming the same `--node-rank` sees the first one's claim;
//! - `failed`: the round's root cause (first writer wins), polled by every agent;
//! - `rows/<g>`: node `g`'s table rows after a failure;
//! - `done` / `left`: the exit barrier counters.

use std::time::{Duration, Instant};

use phalanx_store::Store;
use serde::{Deserialize, Serialize};

use crate::worker_env::Layout;
use crate::Error;

/// One agent's entry in a round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Claim {
    pub(crate) nproc: u32,
    pub(crate) nnodes: u32,
    /// Random per agent process: tells two agents with the same node rank apart.
    pub(crate) nonce: String,
    pub(crate) host: String,
}

/// How long node 0 keeps the store up after finding that another node disagrees on --nnodes.
const MISMATCH_LINGER: Duration = Duration::from_millis(600);

pub(crate) fn key(round: u32, what: &str) -> String {
    format!("agent/{round}/{what}")
}

fn store_err(op: &'static str, key: &str, e: phalanx_store::Error) -> Error {
    Error::Store {
        op,
        key: key.to_string(),
        reason: e.to_string(),
    }
}

/// Joins round `round` as node `group_rank` and returns the rank layout once all `claim.nnodes`
/// agents are in. `interrupted` is polled between waits (the agent's signal check).
pub(crate) fn rendezvous(
    store: &dyn Store,
    round: u32,
    group_rank: u32,
    claim: &Claim,
    timeout: Duration,
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<Option<Layout>, Error> {
    let mine = serde_json::to_vec(claim).expect("a claim serialises");
    let my_key = key(round, &format!("node/{group_rank}"));
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
    let keys: Vec<String> = (0..claim.nnodes)
        .map(|g| key(round, &format!("node/{g}")))
        .collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let start = Instant::now();
    loop {
        if store
            .check(&refs)
            .map_err(|e| store_err("check", refs[0], e))?
        {
            break;
        }
        if interrupted() {
            return Ok(None);
        }
        // A node that disagrees on --nnodes is an error now, not after the timeout: the claims
        // already in tell (node 0, which hosts the store, claims first).
        for (g, k) in keys.iter().enumerate() {
            if g as u32 == group_rank || !store.check(&[k]).map_err(|e| store_err("check", k, e))? {
                continue;
            }
            if let Ok(c) =
                serde_json::from_slice::<Claim>(&store.get(k).map_err(|e| store_err("get", k, e))?)
            {
                if c.nnodes != claim.nnodes {
                    return Err(Error::InconsistentNnodes {
                        node_rank: g as u32,
                        theirs: c.nnodes,
                        mine_rank: group_rank,
                        mine: claim.nnodes,
                    });
                }
            }
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
        match store.wait_timeout(&refs, Duration::from_millis(200)) {
            Ok(()) | Err(phalanx_store::Error::Timeout { .. }) => {}
            Err(e) => return Err(store_err("wait", refs[0], e)),
        }
    }
    let values = store
        .multi_get(&refs)
        .map_err(|e| store_err("multi_get", refs[0], e))?;
    let mut sizes = Vec::with_capacity(values.len());
    for (g, v) in values.iter().enumerate() {
        let c: Claim = serde_json::from_slice(v).map_err(|e| Error::Store {
            op: "rendezvous",
            key: keys[g].clone(),
            reason: format!("unreadable claim: {e}"),
        })?;
        if c.nnodes != claim.nnodes {
            if group_rank == 0 {
                // This node hosts the store: keep it up a moment so that the other nodes read
                // the claims and report the mismatch themselves, instead of a lost store.
                std::thread::sleep(MISMATCH_LINGER);
            }
            return Err(Error::InconsistentNnodes {
                node_rank: g as u32,
                theirs: c.nnodes,
                mine_rank: group_rank,
                mine: claim.nnodes,
            });
        }
        sizes.push(c.nproc);
    }
    Ok(Some(Layout::from_sizes(group_rank, &sizes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use phalanx_store::HashStore;

    fn claim(nproc: u32, nnodes: u32, nonce: &str) -> Claim {
        Claim {
            nproc,
            nnodes,
            nonce: nonce.into(),
            host: format!("host-{nonce}"),
        }
    }

    #[test]
    fn three_nodes_get_disjoint_ranks() {
        let store = HashStore::new();
        let sizes = [2, 3, 1];
        let handles: Vec<_> = (0..3u32)
            .map(|g| {
                let s = store.clone();
                std::thread::spawn(move || {
                    let c = claim(sizes[g as usize], 3, &g.to_string());
                    rendezvous(&s, 0, g, &c, Duration::from_secs(10), &mut || false)
                        .unwrap()
                        .unwrap()
                })
            })
            .collect();
        let layouts: Vec<Layout> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let mut ranks: Vec<u32> = layouts
            .iter()
            .flat_map(|l| (0..l.local_world_size).map(|lr| l.rank(lr)))
            .collect();
        ranks.sort();
        assert_eq!(ranks, (0..6).collect::<Vec<_>>());
        assert!(layouts
            .iter()
            .all(|l| l.world_size == 6 && l.group_world_size == 3));
        assert_eq!(layouts[1].base_rank, 2);
    }

    #[test]
    fn duplicate_node_rank_is_named() {
        let store = HashStore::new();
        store
            .compare_set(
                &key(0, "node/1"),
                b"",
                &serde_json::to_vec(&claim(1, 2, "a")).unwrap(),
            )
            .unwrap();
        let e = rendezvous(
            &store,
            0,
            1,
            &claim(1, 2, "b"),
            Duration::from_secs(1),
            &mut || false,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--node-rank 1") && e.contains("host-a"), "{e}");
    }

    #[test]
    fn inconsistent_nnodes_is_named() {
        let store = HashStore::new();
        let s2 = store.clone();
        let t = std::thread::spawn(move || {
            rendezvous(
                &s2,
                0,
                1,
                &claim(1, 3, "b"),
                Duration::from_secs(2),
                &mut || false,
            )
        });
        let e = rendezvous(
            &store,
            0,
            0,
            &claim(1, 2, "a"),
            Duration::from_secs(2),
            &mut || false,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--nnodes 3") && e.contains("WORLD_SIZE"), "{e}");
        let _ = t.join();
    }

    #[test]
    fn missing_nodes_are_listed_on_timeout() {
        let store = HashStore::new();
        let e = rendezvous(
            &store,
            4,
            0,
            &claim(1, 3, "a"),
            Duration::from_millis(300),
            &mut || false,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("round 4") && e.contains("[1, 2]"), "{e}");
    }
}
