//! Rank-level rendezvous through the store: every rank learns every peer's listen address
//! and host, and the group agrees on yes/no questions, in O(1) store requests per rank.
//!
//! Note [Leader gather]
//! The obvious exchange — each rank sets `pg/addr/<r>` and reads all the others — costs
//! world_size² store reads: 1,048,576 requests at 1,024 ranks, all on one store thread pool.
//! Instead each rank sets one key `pg/peer/<r>`; rank 0 waits for all of them with one request,
//! reads them with one more, and publishes one table `pg/peers` (hosts deduplicated, ~25 bytes
//! per rank) that every rank fetches with one wait and one get. Store requests: 3 per rank plus
//! 2 on rank 0; bytes: each rank reads the table once, which a full mesh needs anyway.
//! Votes (does everyone have shared memory?) gather the same way: each rank sets
//! `<vote>/<r>`, rank 0 reads them all and publishes the outcome. (A single counter bumped by
//! every rank costs one request per rank on the native store, but on etcd, which has no atomic
//! add, each bump is a compare-and-set whose retries grow with the ranks.)

use std::{net::SocketAddr, time::Duration};

use phalanx_store::Store;

use crate::{Error, Result};

/// One rank's entry in the peer table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Where its mesh listener accepts connections.
    pub addr: SocketAddr,
    /// Which host (and node agent) it runs on; see `shm_setup::host_id`.
    pub host: String,
}

const TABLE_KEY: &str = "pg/peers";

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
) -> Result<Vec<Peer>> {
    let store_err = |source| Error::Store { rank, source };
    if me.host.contains(char::is_whitespace) {
        return Err(Error::Env {
            name: "host id".into(),
            value: me.host.clone(),
            reason: "contains whitespace".into(),
        });
    }
    // compare_set: the first process to claim a rank keeps it, a second one is named.
    let entry = format!("{} {} {world}", me.addr, me.host);
    let key = peer_key(rank);
    let got = store
        .compare_set(&key, b"", entry.as_bytes())
        .map_err(store_err)?;
    if got != entry.as_bytes() {
        return Err(Error::Env {
            name: "RANK".into(),
            value: rank.to_string(),
            reason: format!(
                "two processes claim rank {rank}: this one ({} on {}) and {} (set RANK/--node-rank so that each rank is started once)",
                me.addr,
                me.host,
                String::from_utf8_lossy(&got)
            ),
        });
    }
    if rank == 0 {
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
        store
            .set(TABLE_KEY, encode(world, &peers).as_bytes())
            .map_err(store_err)?;
        return Ok(peers);
    }
    if let Err(e) = store.wait_timeout(&[TABLE_KEY], timeout) {
        // Tell which ranks rank 0 is still waiting for: usually the real culprit.
        let keys: Vec<String> = (0..world).map(peer_key).collect();
        let missing = missing(store, &keys);
        return Err(match (e, missing) {
            (phalanx_store::Error::Timeout { .. }, Some(m)) if !m.is_empty() => {
                Error::RendezvousIncomplete {
                    rank,
                    missing: m,
                    waited_s: timeout.as_secs_f64(),
                }
            }
            (e, _) => store_err(e),
        });
    }
    let table = store.get(TABLE_KEY).map_err(store_err)?;
    let (theirs, peers) = decode(rank, &table)?;
    if theirs != world {
        return Err(Error::Env {
            name: "WORLD_SIZE".into(),
            value: world.to_string(),
            reason: format!("rank 0 was started with WORLD_SIZE={theirs}, ours is {world}"),
        });
    }
    if peers.len() != world || peers[rank] != *me {
        return Err(bad_table(
            rank,
            format!(
                "{} entries, this rank's entry {:?} (world size {world}, expected {} {})",
                peers.len(),
                peers.get(rank),
                me.addr,
                me.host
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
    store
        .set(&format!("{key}/{rank}"), if ok { b"1" } else { b"0" })
        .map_err(store_err)?;
    let outcome = format!("{key}/outcome");
    if rank == 0 {
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
    store
        .wait_timeout(&[&outcome], timeout)
        .map_err(store_err)?;
    Ok(store.get(&outcome).map_err(store_err)? == b"1")
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

/// `w <world size>`, `h <host>` lines (each distinct host once), then one
/// `r <addr> <host index>` line per rank.
fn encode(world: usize, peers: &[Peer]) -> String {
    use std::fmt::Write;
    // Each host's index by name: a search of the list per rank grew as ranks × hosts.
    let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut hosts: Vec<&str> = Vec::new();
    let mut rows = String::with_capacity(peers.len() * 28);
    for p in peers {
        let i = *index.entry(&p.host).or_insert_with(|| {
            hosts.push(&p.host);
            hosts.len() - 1
        });
        let _ = writeln!(rows, "r {} {i}", p.addr);
    }
    let mut out = format!("w {world}\n");
    out.extend(hosts.iter().map(|h| format!("h {h}\n")));
    out.push_str(&rows);
    out
}

/// The world size rank 0 was started with, and the peers.
fn decode(rank: usize, table: &[u8]) -> Result<(usize, Vec<Peer>)> {
    let text = std::str::from_utf8(table).map_err(|_| bad_table(rank, "not UTF-8".into()))?;
    let mut hosts = Vec::new();
    let mut peers = Vec::new();
    let mut world = None;
    for (n, line) in text.lines().enumerate() {
        let bad = || bad_table(rank, format!("line {}: {line:?}", n + 1));
        match line.split_once(' ') {
            Some(("w", w)) if n == 0 => world = Some(w.parse::<usize>().map_err(|_| bad())?),
            Some(("h", host)) => hosts.push(host.to_string()),
            Some(("r", rest)) => {
                let (addr, idx) = rest.split_once(' ').ok_or_else(bad)?;
                let host = idx
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| hosts.get(i))
                    .ok_or_else(bad)?;
                peers.push(Peer {
                    addr: addr.parse().map_err(|_| bad())?,
                    host: host.clone(),
                });
            }
            _ => return Err(bad()),
        }
    }
    let world = world.ok_or_else(|| bad_table(rank, "no `w <world size>` line".into()))?;
    Ok((world, peers))
}

fn bad_table(rank: usize, why: String) -> Error {
    Error::Env {
        name: format!("store key {TABLE_KEY}"),
        value: String::new(),
        reason: format!("rank {rank} cannot read the peer table: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use phalanx_store::HashStore;

    fn peer(i: usize, host: &str) -> Peer {
        Peer {
            addr: format!("10.0.0.{}:{}", i % 250 + 1, 4000 + i)
                .parse()
                .unwrap(),
            host: host.into(),
        }
    }

    #[test]
    fn table_round_trips_and_dedups_hosts() {
        let peers: Vec<Peer> = (0..6).map(|i| peer(i, ["a/b/0", "c/d/1"][i / 3])).collect();
        let text = encode(6, &peers);
        assert_eq!(text.matches("\nh ").count(), 2, "{text}");
        assert_eq!(decode(0, text.as_bytes()).unwrap(), (6, peers));
    }

    #[test]
    fn bad_tables_are_named() {
        for t in [
            "r 1.2.3.4:5 0\n",
            "h x\nr nonsense 0\n",
            "q\n",
            "h x\nr 1.2.3.4:5 9\n",
        ] {
            let e = decode(3, t.as_bytes()).unwrap_err().to_string();
            assert!(e.contains("pg/peers") && e.contains("rank 3"), "{t:?}: {e}");
        }
    }

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
            assert_eq!(
                peers,
                (0..world).map(|r| peer(r, "h/x/0")).collect::<Vec<_>>()
            );
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
