//! Rank-level rendezvous through the store: every rank learns every peer's listen address
//! and host, and the group agrees on yes/no questions, in O(1) store requests per rank.
//!
//! Note [Leader gather]
//! The obvious exchange — each rank sets `pg/addr/<r>` and reads all the others — costs
//! world_size² store reads: 1,048,576 requests at 1,024 ranks, all on one store thread pool.
//! Instead each rank sets one key `pg/peer/<r>`; rank 0 waits for all of them with one request,
//! reads them with one more, and publishes one table `pg/peers` (binary, a few bytes per rank:
//! Note [A table read in place]) that every rank fetches with one get that waits for it, sent
//! with its own key in one round trip. Store requests: 2 per rank plus 2 on rank 0 (a wait and
//! a get where the store cannot wait in a get, as on etcd); bytes: each rank reads the table once, which a full mesh needs anyway.
//! Votes (does everyone have shared memory?) gather the same way: each rank sets
//! `<vote>/<r>`, rank 0 reads them all and publishes the outcome. (A single counter bumped by
//! every rank costs one request per rank on the native store, but on etcd, which has no atomic
//! add, each bump is a compare-and-set whose retries grow with the ranks.)

use std::time::Duration;

use phalanx_store::{Claim, Store};

use crate::{Error, Result};

mod table;

use table::{bad_table, TABLE_KEY};
pub use table::{Peer, PeerTable};

fn peer_key(rank: usize) -> String {
    format!("pg/peer/{rank}")
}

/// Publishes `me` and returns every rank's entry, indexed by rank.
pub fn exchange(
    store: &dyn Store,
    rank: usize,
    world: usize,
    me: &Peer,
    timeout: Duration,
) -> Result<PeerTable> {
    let store_err = |source| Error::Store { rank, source };
    if me.host.contains(char::is_whitespace) {
        return Err(Error::Env {
            name: "host id".into(),
            value: me.host.clone(),
            reason: "contains whitespace".into(),
        });
    }
    // A claim (compare_set): the first process to claim a rank keeps it, a second is named.
    let entry = format!("{} {} {world}", me.addr, me.host);
    let key = peer_key(rank);
    let claimed_twice = |got: &[u8]| {
        Error::Env {
        name: "RANK".into(),
        value: rank.to_string(),
        reason: format!(
            "two processes claim rank {rank}: this one ({} on {}) and {} (set RANK/--node-rank so that each rank is started once)",
            me.addr,
            me.host,
            String::from_utf8_lossy(got)
        ),
    }
    };
    if rank == 0 {
        let got = store
            .compare_set(&key, b"", entry.as_bytes())
            .map_err(store_err)?;
        if got != entry.as_bytes() {
            return Err(claimed_twice(&got));
        }
        let keys: Vec<String> = (0..world).map(peer_key).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        wait_or_name_missing(store, rank, &refs, timeout)?;
        let entries = store.multi_get(&refs).map_err(store_err)?;
        let mut peers = Vec::with_capacity(world);
        for (r, v) in entries.iter().enumerate() {
            let (peer, theirs) = parse_entry(rank, r, v)?;
            if theirs != world {
                // The mesh handshake then refuses that rank and the job fails naming it; say
                // why here, where both values are known.
                tracing::warn!("rank {r} was started with WORLD_SIZE={theirs}, ours is {world}");
            }
            peers.push(peer);
        }
        let table = PeerTable::encode(world, &peers);
        store.set(TABLE_KEY, table.bytes()).map_err(store_err)?;
        return Ok(table);
    }
    // The claim and a get that waits for the table, in one round trip (Note [Two requests in
    // one round trip] in phalanx-store).
    let table = match store.claim_then_get(&key, entry.as_bytes(), TABLE_KEY, timeout) {
        Ok(Claim::Held(table)) => table,
        Ok(Claim::Taken(got)) => return Err(claimed_twice(&got)),
        Err(e @ phalanx_store::Error::Timeout { .. }) => {
            // Tell which ranks rank 0 is still waiting for: usually the real culprit. (Only
            // after a timeout: it costs a request per rank, and every rank whose wait was
            // abandoned (Note [Watched waits]) would send them at once.)
            let keys: Vec<String> = (0..world).map(peer_key).collect();
            return Err(match missing(store, &keys) {
                Some(m) if !m.is_empty() => Error::RendezvousIncomplete {
                    rank,
                    missing: m,
                    waited_s: timeout.as_secs_f64(),
                },
                _ => store_err(e),
            });
        }
        Err(e) => return Err(store_err(e)),
    };
    let peers = PeerTable::decode(rank, table)?;
    if peers.world() != world {
        return Err(Error::Env {
            name: "WORLD_SIZE".into(),
            value: world.to_string(),
            reason: format!(
                "rank 0 was started with WORLD_SIZE={}, ours is {world}",
                peers.world()
            ),
        });
    }
    // The host ids stay with rank 0 (Note [A table read in place]); the address is checked.
    if peers.len() != world || peers.addr(rank) != me.addr {
        return Err(bad_table(
            rank,
            format!(
                "{} entries, this rank's address {} (world size {world}, expected {})",
                peers.len(),
                if rank < peers.len() {
                    peers.addr(rank).to_string()
                } else {
                    "missing".into()
                },
                me.addr,
            ),
        ));
    }
    Ok(peers)
}

/// Every rank says `ok`; returns whether all of them did. Each rank writes its own
/// `<key>/<rank>`; rank 0 gathers them and publishes the outcome under `<key>/outcome` (Note
/// [Leader gather]).
pub fn vote(
    store: &dyn Store,
    key: &str,
    rank: usize,
    world: usize,
    ok: bool,
    timeout: Duration,
) -> Result<bool> {
    let store_err = |source| Error::Store { rank, source };
    let mine = format!("{key}/{rank}");
    let said: &[u8] = if ok { b"1" } else { b"0" };
    let outcome = format!("{key}/outcome");
    if rank == 0 {
        store.set(&mine, said).map_err(store_err)?;
        let keys: Vec<String> = (0..world).map(|r| format!("{key}/{r}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        wait_or_name_missing(store, rank, &refs, timeout)?;
        let all = store
            .multi_get(&refs)
            .map_err(store_err)?
            .iter()
            .all(|v| v == b"1");
        store
            .set(&outcome, if all { b"1" } else { b"0" })
            .map_err(store_err)?;
        return Ok(all);
    }
    // The vote and a get that waits for the outcome, in one round trip.
    let got = store
        .set_then_get(&mine, said, &outcome, timeout)
        .map_err(store_err)?;
    Ok(got == b"1")
}

fn wait_or_name_missing(store: &dyn Store, rank: usize, keys: &[&str], t: Duration) -> Result<()> {
    match store.wait_timeout(keys, t) {
        Ok(()) => Ok(()),
        Err(phalanx_store::Error::Timeout { .. }) => {
            let owned: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
            Err(Error::RendezvousIncomplete {
                rank,
                missing: missing(store, &owned).unwrap_or_default(),
                waited_s: t.as_secs_f64(),
            })
        }
        Err(source) => Err(Error::Store { rank, source }),
    }
}

/// Ranks whose `pg/peer/<r>` key is absent (only called after a timeout: O(world) checks once).
fn missing(store: &dyn Store, keys: &[String]) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for (r, k) in keys.iter().enumerate() {
        if !store.check(&[k]).ok()? {
            out.push(r);
        }
    }
    Some(out)
}

/// `<addr> <host> <world size>`, as each rank writes under `pg/peer/<rank>`.
fn parse_entry(rank: usize, of: usize, v: &[u8]) -> Result<(Peer, usize)> {
    let text = String::from_utf8_lossy(v);
    let bad = || Error::Env {
        name: format!("store key {}", peer_key(of)),
        value: text.to_string(),
        reason: format!("rank {rank} expected `<socket address> <host id> <world size>`"),
    };
    let mut words = text.split(' ');
    let (Some(addr), Some(host), Some(world), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(bad());
    };
    Ok((
        Peer {
            addr: addr.parse().map_err(|_| bad())?,
            host: host.to_string(),
        },
        world.parse().map_err(|_| bad())?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use phalanx_store::HashStore;

    use super::table::tests::peer;

    #[test]
    fn threads_exchange_and_vote() {
        let store = HashStore::new();
        let world = 16;
        let handles: Vec<_> = (0..world)
            .map(|r| {
                let s = store.clone();
                std::thread::spawn(move || {
                    let t = Duration::from_secs(10);
                    let peers = exchange(&s, r, world, &peer(r, "h/x/0"), t).unwrap();
                    let all = vote(&s, "v1", r, world, true, t).unwrap();
                    let one_no = vote(&s, "v2", r, world, r != 7, t).unwrap();
                    (peers, all, one_no)
                })
            })
            .collect();
        for h in handles {
            let (peers, all, one_no) = h.join().unwrap();
            let want: Vec<(std::net::SocketAddr, u32)> =
                (0..world).map(|r| (peer(r, "h/x/0").addr, 0)).collect();
            let got: Vec<_> = (0..peers.len())
                .map(|r| (peers.addr(r), peers.host(r)))
                .collect();
            assert_eq!(got, want);
            assert!(all && !one_no);
        }
    }

    #[test]
    fn a_second_claim_on_a_rank_and_another_world_size_are_named() {
        let store = HashStore::new();
        let t = Duration::from_secs(5);
        let s = store.clone();
        let first = std::thread::spawn(move || exchange(&s, 1, 2, &peer(1, "h"), t));
        std::thread::sleep(Duration::from_millis(50));
        let e = exchange(&store, 1, 2, &peer(9, "h"), t)
            .unwrap_err()
            .to_string();
        assert!(e.contains("two processes claim rank 1"), "{e}");
        exchange(&store, 0, 2, &peer(0, "h"), t).unwrap();
        first.join().unwrap().unwrap();
        let store = HashStore::new();
        let s = store.clone();
        let odd = std::thread::spawn(move || exchange(&s, 1, 3, &peer(1, "h"), t));
        exchange(&store, 0, 2, &peer(0, "h"), t).unwrap();
        let e = odd.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("WORLD_SIZE=2, ours is 3"), "{e}");
    }

    #[test]
    fn a_missing_rank_is_named() {
        let store = HashStore::new();
        let t = Duration::from_millis(200);
        let s = store.clone();
        let other = std::thread::spawn(move || exchange(&s, 1, 4, &peer(1, "h"), t));
        let e = exchange(&store, 0, 4, &peer(0, "h"), t)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[2, 3]"), "{e}");
        let e = other.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("rank 1") && e.contains("[2, 3]"), "{e}");
    }
}
