//! Node ranks taken on arrival (c10d and etcd): Note [c10d node ranks].

use std::time::{Duration, Instant};

use phalanx_store::Store;

use crate::Error;

/// Frees node rank `k` of a node that was lost (its heartbeat stopped): its agent is gone, so
/// a node that arrives later (that node restarted, or another) may take it (Note [c10d node
/// ranks]).
pub(crate) fn release_node_rank(store: &dyn Store, k: u32) {
    let _ = store.set(&slot_key(k), b"");
}

// Note [c10d node ranks]
// torchrun's c10d rendezvous orders the nodes as they arrive; phalanx's rounds need a node
// rank per agent below --nnodes MAX, with node 0 the store's host. So an agent that does not
// host takes the lowest free slot 1..MAX-1 (0..MAX-1 under etcd, where no agent hosts) with compare_set on `rdzv/c10d/node/<k>` (the
// store's compare_set is atomic: two agents arriving at once take two slots), writing its
// identity (host name and a random nonce). It keeps that rank for the whole job, through
// restarts and rounds, and gives it back when it exits. A node whose agent was killed holds
// its slot until node 0 declares it lost (its heartbeat stopped: docs/launch.md), when node 0
// frees it, so the node restarted (or another) takes it again; an arriving node that finds
// every slot held is refused with a sentence naming the holders.

/// The key of c10d node slot `k`.
fn slot_key(k: u32) -> String {
    format!("rdzv/c10d/node/{k}")
}

/// Takes this agent's node rank on arrival (Note [c10d node ranks]), waiting up to `timeout`
/// for one to be freed when every one is held (a node restarted before node 0 declared its
/// old agent lost).
pub(crate) fn take_node_rank(
    store: &dyn Store,
    first: u32,
    nnodes_max: u32,
    me: &str,
    timeout: Duration,
) -> Result<u32, Error> {
    let store_err = |key: String, e: phalanx_store::Error| Error::Store {
        op: "compare_set",
        key,
        reason: e.to_string(),
    };
    let deadline = Instant::now() + timeout;
    loop {
        let mut holders = Vec::new();
        for k in first..nnodes_max {
            let key = slot_key(k);
            let held = store
                .compare_set(&key, b"", me.as_bytes())
                .map_err(|e| store_err(key.clone(), e))?;
            if held == me.as_bytes() {
                return Ok(k);
            }
            holders.push(String::from_utf8_lossy(&held).into_owned());
        }
        if Instant::now() >= deadline {
            return Err(Error::BadFlag {
                flag: "--nnodes",
                reason: format!(
                    "allows {nnodes_max} node(s), and every node rank{} stayed taken for \
                     {:.0} s (by {holders:?}; a node whose agent was killed keeps its rank \
                     until the others declare it lost): this node cannot join",
                    if first > 0 { " after the host's" } else { "" },
                    timeout.as_secs_f64()
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Gives node rank `k` back (the agent ends), if `me` still holds it.
pub(crate) fn give_back_node_rank(store: &dyn Store, k: u32, me: &str) {
    let _ = store.compare_set(&slot_key(k), me.as_bytes(), b"");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ranks_are_taken_on_arrival_and_given_back() {
        let store = phalanx_store::HashStore::new();
        assert_eq!(
            take_node_rank(&store, 1, 3, "a", Duration::ZERO).unwrap(),
            1
        );
        assert_eq!(
            take_node_rank(&store, 1, 3, "b", Duration::ZERO).unwrap(),
            2
        );
        // A third arrival finds every slot taken, and the sentence names the holders.
        let e = take_node_rank(&store, 1, 3, "c", Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"a\"") && e.contains("\"b\""), "{e}");
        // The same agent asking again keeps its slot; a slot given back is taken again.
        assert_eq!(
            take_node_rank(&store, 1, 3, "a", Duration::ZERO).unwrap(),
            1
        );
        give_back_node_rank(&store, 1, "a");
        assert_eq!(
            take_node_rank(&store, 1, 3, "c", Duration::ZERO).unwrap(),
            1
        );
        // Only the holder gives a slot back.
        give_back_node_rank(&store, 2, "a");
        let e = take_node_rank(&store, 1, 3, "d", Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"b\""), "{e}");
    }
}
