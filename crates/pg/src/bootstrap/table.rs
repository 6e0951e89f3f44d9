//! The peer table rank 0 publishes: its encoding, and reading it in place (Note [A table read
//! in place]).

use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6};

use crate::{Error, Result};

/// One rank's entry in the peer table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Where its mesh listener accepts connections.
    pub addr: SocketAddr,
    /// Which host (and node agent) it runs on; see `shm_setup::host_id`.
    pub host: String,
}

pub(super) const TABLE_KEY: &str = "pg/peers";

/// The table's first bytes; the `1` is its version.
const MAGIC: &[u8; 4] = b"PXP1";
/// Header: magic, then world size, ranks, hosts, addresses and runs as `u32`s.
const HEADER: usize = 4 + 5 * 4;
/// An address: family (4 or 6) as `u32`, 16 address bytes (an IPv4 address mapped), scope id.
const IP_LEN: usize = 24;
/// A run of consecutive ranks on one host and address: end (exclusive), host, address index.
const RUN_LEN: usize = 12;

/// The job's peer table as rank 0 published it, read in place (Note [A table read in place]).
///
/// Note [A table read in place]
/// Every rank reads the whole table, so a job's ranks together read world² entries: at 16,384
/// ranks, 268 million. The text table this replaced (~25 bytes a rank, a `String` per host
/// name per rank) cost 7 GB read and as many allocations; a simulated world of that size on
/// one machine could not finish. The table is now binary and compact: the distinct addresses
/// once (24 bytes each), then runs of consecutive ranks on one host and address (12 bytes each;
/// ranks on a host are consecutive under phalanx launch and torchrun), then 2 bytes of port per
/// rank: 6.5 bytes a rank on hosts of 8 ranks with an address each, 3.5 on one address. A rank
/// checks the table's shape once (O(runs)) and reads entries from the bytes when asked, so
/// taking the table costs one copy of it and no allocation per rank.
/// Hosts are numbered in the order rank 0 first meets them: what the group needs from a host
/// id is which ranks share one (shared memory, the hierarchical allreduce, host subgroups), and
/// the ids themselves (a boot id and a host name, ~50 bytes) would triple the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTable {
    bytes: Vec<u8>,
    world: usize,
    ranks: usize,
    hosts: usize,
    ips: usize,
    runs: usize,
}

impl PeerTable {
    /// Rank 0's table of `peers` (indexed by rank) for a world of `world`.
    pub(super) fn encode(world: usize, peers: &[Peer]) -> PeerTable {
        let mut host_index: std::collections::HashMap<&str, u32> = Default::default();
        let mut ip_index: std::collections::HashMap<(IpAddr, u32), u32> = Default::default();
        let mut ips: Vec<(IpAddr, u32)> = Vec::new();
        // (end, host, address)
        let mut runs: Vec<(u32, u32, u32)> = Vec::new();
        for (r, p) in peers.iter().enumerate() {
            let next = host_index.len() as u32;
            let host = *host_index.entry(&p.host).or_insert(next);
            let key = (p.addr.ip(), scope(&p.addr));
            let ip = *ip_index.entry(key).or_insert_with(|| {
                ips.push(key);
                ips.len() as u32 - 1
            });
            match runs.last_mut() {
                Some(last) if last.1 == host && last.2 == ip => last.0 = r as u32 + 1,
                _ => runs.push((r as u32 + 1, host, ip)),
            }
        }
        let mut b = Vec::with_capacity(
            HEADER + ips.len() * IP_LEN + runs.len() * RUN_LEN + peers.len() * 2,
        );
        b.extend_from_slice(MAGIC);
        for n in [world, peers.len(), host_index.len(), ips.len(), runs.len()] {
            b.extend_from_slice(&(n as u32).to_le_bytes());
        }
        for (ip, scope) in &ips {
            let (family, bytes) = match ip {
                IpAddr::V4(a) => (4u32, a.to_ipv6_mapped().octets()),
                IpAddr::V6(a) => (6u32, a.octets()),
            };
            b.extend_from_slice(&family.to_le_bytes());
            b.extend_from_slice(&bytes);
            b.extend_from_slice(&scope.to_le_bytes());
        }
        for (end, host, ip) in &runs {
            for n in [end, host, ip] {
                b.extend_from_slice(&n.to_le_bytes());
            }
        }
        for p in peers {
            b.extend_from_slice(&p.addr.port().to_le_bytes());
        }
        PeerTable::decode(0, b).expect("rank 0's own table reads back")
    }

    /// Checks the table's shape (lengths, runs in order, indices in range) and keeps its bytes.
    pub(super) fn decode(rank: usize, bytes: Vec<u8>) -> Result<PeerTable> {
        let bad = |why: String| bad_table(rank, why);
        if bytes.len() < HEADER || &bytes[..4] != MAGIC {
            return Err(bad(format!(
                "{} bytes that do not start with {:?} (a phalanx of another version wrote it?)",
                bytes.len(),
                std::str::from_utf8(MAGIC).unwrap_or_default()
            )));
        }
        let word = |i: usize| u32_at(&bytes, 4 + 4 * i) as usize;
        let (world, ranks, hosts, ips, runs) = (word(0), word(1), word(2), word(3), word(4));
        let want = HEADER as u64
            + ips as u64 * IP_LEN as u64
            + runs as u64 * RUN_LEN as u64
            + ranks as u64 * 2;
        if bytes.len() as u64 != want {
            return Err(bad(format!(
                "{} bytes, but its header ({ranks} ranks, {ips} addresses, {runs} runs) makes {want}",
                bytes.len()
            )));
        }
        let t = PeerTable {
            bytes,
            world,
            ranks,
            hosts,
            ips,
            runs,
        };
        let mut start = 0;
        // Hosts are numbered in order of first appearance, so each run's is one seen before or
        // the next one, and the count is the numbers used (init trusts `hosts() == 1`).
        let mut seen = 0;
        for i in 0..runs {
            let (end, host, ip) = t.run(i);
            if end <= start || end > ranks || host > seen || host >= hosts || ip >= ips {
                return Err(bad(format!(
                    "run {i} (ranks {start}..{end}, host {host}, address {ip}) does not fit \
                     {ranks} ranks, {hosts} hosts, {ips} addresses"
                )));
            }
            start = end;
            seen = seen.max(host + 1);
        }
        if start != ranks {
            return Err(bad(format!("its runs cover {start} of {ranks} ranks")));
        }
        if seen != hosts {
            return Err(bad(format!(
                "it counts {hosts} hosts, its runs number {seen}"
            )));
        }
        for i in 0..ips {
            let family = u32_at(&t.bytes, t.ip_at(i));
            if family != 4 && family != 6 {
                return Err(bad(format!("address {i} has family {family}")));
            }
        }
        Ok(t)
    }

    /// The encoded table, as it goes into the store.
    pub(super) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The world size rank 0 was started with.
    pub(super) fn world(&self) -> usize {
        self.world
    }

    /// Ranks in the table.
    pub fn len(&self) -> usize {
        self.ranks
    }

    /// Whether the table has no ranks.
    pub fn is_empty(&self) -> bool {
        self.ranks == 0
    }

    /// Distinct hosts among the ranks.
    pub fn hosts(&self) -> usize {
        self.hosts
    }

    /// `rank`'s host, numbered in rank order of first appearance: ranks with equal numbers
    /// share a host and node agent (`shm_setup::host_id`).
    pub fn host(&self, rank: usize) -> u32 {
        self.run(self.run_of(rank)).1 as u32
    }

    /// Every rank's host number, indexed by rank.
    pub fn host_numbers(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.ranks);
        let mut start = 0;
        for i in 0..self.runs {
            let (end, host, _) = self.run(i);
            out.extend(std::iter::repeat_n(host as u32, end - start));
            start = end;
        }
        out
    }

    /// Where `rank`'s mesh listener accepts connections.
    pub fn addr(&self, rank: usize) -> SocketAddr {
        let ip_at = self.ip_at(self.run(self.run_of(rank)).2);
        let b = &self.bytes;
        let octets: [u8; 16] = b[ip_at + 4..ip_at + 20].try_into().expect("16 bytes");
        let port_at = self.ports_at() + 2 * rank;
        let port = u16::from_le_bytes([b[port_at], b[port_at + 1]]);
        let v6 = Ipv6Addr::from(octets);
        match (u32_at(b, ip_at), v6.to_ipv4_mapped()) {
            (4, Some(v4)) => SocketAddr::new(IpAddr::V4(v4), port),
            _ => SocketAddr::V6(SocketAddrV6::new(v6, port, 0, u32_at(b, ip_at + 20))),
        }
    }

    /// `(end, host, address index)` of run `i`.
    fn run(&self, i: usize) -> (usize, usize, usize) {
        let at = HEADER + self.ips * IP_LEN + i * RUN_LEN;
        let w = |k: usize| u32_at(&self.bytes, at + 4 * k) as usize;
        (w(0), w(1), w(2))
    }

    /// The run that holds `rank` (runs end in increasing order).
    fn run_of(&self, rank: usize) -> usize {
        assert!(
            rank < self.ranks,
            "rank {rank} of a {}-rank table",
            self.ranks
        );
        let (mut lo, mut hi) = (0, self.runs);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.run(mid).0 <= rank {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn ip_at(&self, i: usize) -> usize {
        HEADER + i * IP_LEN
    }

    fn ports_at(&self) -> usize {
        HEADER + self.ips * IP_LEN + self.runs * RUN_LEN
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn scope(addr: &SocketAddr) -> u32 {
    match addr {
        SocketAddr::V4(_) => 0,
        SocketAddr::V6(a) => a.scope_id(),
    }
}

pub(super) fn bad_table(rank: usize, why: String) -> Error {
    Error::Env {
        name: format!("store key {TABLE_KEY}"),
        value: String::new(),
        reason: format!("rank {rank} cannot read the peer table: {why}"),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Rank `i` at its own address on `host` (the exchange's tests use it too).
    pub(in crate::bootstrap) fn peer(i: usize, host: &str) -> Peer {
        Peer {
            addr: format!("10.0.0.{}:{}", i % 250 + 1, 4000 + i)
                .parse()
                .unwrap(),
            host: host.into(),
        }
    }

    fn entries(t: &PeerTable) -> Vec<(SocketAddr, u32)> {
        (0..t.len()).map(|r| (t.addr(r), t.host(r))).collect()
    }

    #[test]
    fn table_round_trips_and_numbers_hosts_in_rank_order() {
        let mut peers: Vec<Peer> = (0..7)
            .map(|i| peer(i, ["c/d/1", "a/b/0"][i / 3 % 2]))
            .collect();
        peers[6].addr = "[fe80::1%3]:7".parse().unwrap();
        peers[5].addr = "[::ffff:10.0.0.1]:9".parse().unwrap();
        let t = PeerTable::encode(7, &peers);
        let back = PeerTable::decode(2, t.bytes.clone()).unwrap();
        assert_eq!(back, t);
        let want: Vec<(SocketAddr, u32)> = peers
            .iter()
            .enumerate()
            .map(|(i, p)| (p.addr, [0, 1][i / 3 % 2]))
            .collect();
        assert_eq!(entries(&back), want);
        assert_eq!(back.host_numbers(), vec![0, 0, 0, 1, 1, 1, 0]);
        assert_eq!((back.hosts(), back.world), (2, 7));
        // 2 bytes a rank, plus a run per host change and an address per distinct address.
        let (ips, runs) = (back.ips, back.runs);
        assert_eq!(
            t.bytes.len(),
            HEADER + ips * IP_LEN + runs * RUN_LEN + 7 * 2
        );
    }

    #[test]
    fn a_large_table_holds_a_port_per_rank_and_an_address_per_host() {
        let peers: Vec<Peer> = (0..16_384)
            .map(|r| Peer {
                addr: format!("10.{}.{}.1:{}", r / 8 / 250, r / 8 % 250, 20_000 + r % 8)
                    .parse()
                    .unwrap(),
                host: format!("0f3e9a8c-boot-id/host-{}/0", r / 8),
            })
            .collect();
        let t = PeerTable::encode(16_384, &peers);
        // 2,048 hosts: an address and a run each, and a port per rank.
        assert_eq!(
            t.bytes.len(),
            HEADER + 16_384 * 2 + 2_048 * (IP_LEN + RUN_LEN)
        );
        assert_eq!(t.addr(8 * 300 + 5), peers[8 * 300 + 5].addr);
        assert_eq!(t.host(8 * 300 + 5), 300);
    }

    #[test]
    fn bad_tables_are_named() {
        let good = PeerTable::encode(3, &(0..3).map(|i| peer(i, "h")).collect::<Vec<_>>()).bytes;
        let mut bad_run = good.clone();
        let run0 = HEADER + 3 * IP_LEN;
        bad_run[run0 + 4] = 9; // run 0's host past the hosts
        let mut bad_family = good.clone();
        bad_family[HEADER] = 5;
        let mut bad_hosts = good.clone();
        bad_hosts[4 + 4 * 2] = 2; // two hosts counted, one numbered
        let mut skipped_host = good.clone();
        skipped_host[4 + 4 * 2] = 3;
        skipped_host[run0 + RUN_LEN + 4] = 2; // run 1 on host 2 before host 1 appeared
        for (what, t) in [
            ("text", b"w 3\nh x\n".to_vec()),
            ("short", good[..good.len() - 1].to_vec()),
            ("run", bad_run),
            ("family", bad_family),
            ("hosts", bad_hosts),
            ("skipped", skipped_host),
        ] {
            let e = PeerTable::decode(3, t).unwrap_err().to_string();
            assert!(
                e.contains("pg/peers") && e.contains("rank 3"),
                "{what}: {e}"
            );
        }
    }
}
