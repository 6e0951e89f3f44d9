//! `--rdzv-backend etcd`: the agents meet in an etcd cluster, through etcd's v3 API, and the
//! whole job's store lives there under `/phalanx/<rdzv-id>/` ([`EtcdStore`]). No agent hosts
//! a store, so no host of the job holds what the others need.
//!
//! What lives in etcd (the same keys as in a hosted store, [`phalanx_store::keys`]): the
//! rounds' claims and layouts, the node ranks (taken on arrival, from 0: Note [c10d node
//! ranks]), the workers' process-group bootstrap and fault-tolerance generations (the workers
//! reach etcd themselves, `PHALANX_ETCD_*`), heartbeats, errors and status. Besides them:
//! - `rdzv/etcd/job`: a digest of the job's token, so that two jobs given one `--rdzv-id` are
//!   told apart (the second is refused with a sentence);
//! - `rdzv/etcd/master/<node rank>`: where the PyTorch workers' TCPStore is when that node
//!   holds a round's rank 0 (below);
//! - `rdzv/etcd/agents` and `rdzv/etcd/out`: agents in and out; the last one out removes the
//!   job's keys.
//!
//! PyTorch programs: `init_process_group("env://")` needs a TCPStore at
//! `MASTER_ADDR:MASTER_PORT`. As under torchrun's etcd backend, the workers are not told to use
//! an agent's store (`TORCHELASTIC_USE_AGENT_STORE` is unset), so rank 0's process hosts it.
//! Every agent reserves a free port of its own host on arrival and publishes it in
//! `rdzv/etcd/master/<node rank>`; each round's workers get the address of the round's first
//! node, which holds its rank 0. So when node 0's host is lost, the round `--max-restarts`
//! starts without it has its TCPStore on node 1 (Note [No node is special] in `elastic/policy.rs`).
//!
//! ```
//! use phalanx_launch::RdzvBackend;
//! assert_eq!("etcd".parse::<RdzvBackend>().unwrap(), RdzvBackend::Etcd);
//! assert_eq!("etcd-v3".parse::<RdzvBackend>().unwrap(), RdzvBackend::Etcd);
//! assert!("etcd-v2".parse::<RdzvBackend>().unwrap_err().contains("3.6 removed"));
//! ```

use std::net::{IpAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

use phalanx_store::{EtcdLease, EtcdOptions, EtcdStore, Store};
use sha2::{Digest, Sha256};

use super::backend::{Arrival, Met, Rendezvous};
use super::claims::store_err;
use super::node_rank::{give_back_node_rank, release_node_rank, take_node_rank};
use super::spelling::RdzvConf;
use crate::Error;

const JOB: &str = "rdzv/etcd/job";
/// `rdzv/etcd/master/<node rank>`: that node's address and port for the PyTorch TCPStore.
fn master_key(node: u32) -> String {
    format!("rdzv/etcd/master/{node}")
}
const AGENTS: &str = "rdzv/etcd/agents";
/// The lease of each agent's own keys (Note [etcd leases] in phalanx-store): as long as a node's
/// heartbeat may stop before it is called lost.
const LEASE_TTL: Duration = Duration::from_secs(5);
/// How long etcd may not answer before the job's store counts as lost, unless `--rdzv-conf
/// quorum_timeout` says otherwise: five of etcd's default election timeouts (1 s), enough for
/// a new leader after a split vote (Note [An election is not a lost store] in
/// `elastic/coordinate.rs`).
const STORE_GRACE: Duration = Duration::from_secs(5);
const OUT: &str = "rdzv/etcd/out";
/// The bound on each attempt of the control handle's requests (Note [An attempt's bound] in
/// phalanx-store): a member with a leader answers them in milliseconds.
const CONTROL_ATTEMPT: Duration = Duration::from_millis(500);
/// The bound on each of the monitor's reads: about one poll, so that a read waiting for a
/// new leader does not hold back a closed link's news (Note [The monitor does not wait out
/// an election] in `elastic/coordinate.rs`).
const WATCH_TIMEOUT: Duration = Duration::from_millis(250);

/// `--rdzv-backend etcd` at `--rdzv-endpoint`'s endpoints.
pub(crate) struct Etcd {
    endpoints: String,
    /// `--rdzv-conf quorum_timeout`, else [`STORE_GRACE`].
    grace: Duration,
    /// This agent's place in the job, once it met the others.
    met: Option<EtcdMeeting>,
}

impl Etcd {
    pub(crate) fn new(endpoints: String) -> Self {
        Etcd {
            endpoints,
            grace: STORE_GRACE,
            met: None,
        }
    }
}

impl Rendezvous for Etcd {
    fn meet(&mut self, a: &Arrival<'_>) -> Result<Met, Error> {
        let options = options(&self.endpoints, &a.auth.job_id, a.conf, a.timeout)?;
        self.grace = a.conf.quorum_timeout.unwrap_or(STORE_GRACE);
        let m = meet(options, a, self.grace)?;
        let met = Met {
            node_rank: m.node_rank,
            store: std::sync::Arc::new(m.store.clone()),
            ctl: std::sync::Arc::new(m.ctl.clone()),
            links_at: Some(m.address),
            etcd: Some(m.options.clone()),
            beat: Some(std::sync::Arc::new(m.beat.clone())),
            watch: Some(std::sync::Arc::new(m.store.with_timeout(WATCH_TIMEOUT))),
        };
        self.met = Some(m);
        Ok(met)
    }

    /// No node hosts the store: any node may be lost, node 0 included.
    fn store_host(&self) -> Option<u32> {
        None
    }

    /// Several election timeouts: a leader lost is not a store lost.
    fn store_grace(&self) -> Duration {
        self.grace
    }

    /// The address the round's first node published: that node holds the round's rank 0,
    /// whose process hosts PyTorch's TCPStore.
    fn master(&self, store: &dyn Store, members: &[u32]) -> Result<(String, u16), Error> {
        match (members.iter().min(), &self.met) {
            (Some(&first), _) => master_of(store, first),
            (None, Some(m)) => Ok(m.master.clone()),
            (None, None) => Err(Error::Etcd {
                reason: "no round's master before the rendezvous".into(),
            }),
        }
    }

    fn free_node_rank(&self, store: &dyn Store, g: u32) {
        release_node_rank(store, g);
    }

    /// Gives the node rank back and counts this agent out (the last one out removes the
    /// job's keys), unless etcd stopped answering: a cluster that lost its quorum would hold
    /// every call for PHALANX_TIMEOUT, so the keys stay and the agent says how to remove them.
    fn leave(&mut self, ctl: Option<&dyn Store>) {
        let Some(m) = &self.met else { return };
        match ctl {
            Some(ctl) => {
                give_back_node_rank(ctl, m.node_rank, &m.me);
                leave(&m.store.with_timeout(m.control_timeout * 2));
            }
            None => eprintln!(
                "phalanx launch: etcd does not answer: the job's keys stay under {} \
                 (`etcdctl del --prefix {}` removes them)",
                m.store.prefix(),
                m.store.prefix()
            ),
        }
    }
}

/// This agent's place in an etcd-backed job.
struct EtcdMeeting {
    /// The job's keys, bounded by the rendezvous timeout.
    store: EtcdStore,
    /// The same keys, each call bounded by the control timeout (the coordinator's handle).
    ctl: EtcdStore,
    /// The node rank taken on arrival, and the identity that holds it.
    node_rank: u32,
    me: String,
    /// This node's `MASTER_ADDR`/`MASTER_PORT` for the PyTorch workers' TCPStore, used in
    /// the rounds whose rank 0 it holds ([`master_of`]).
    master: (String, u16),
    /// This node's address for the others (`--local-addr`, else the one it reaches etcd from).
    address: IpAddr,
    /// What the workers need to reach etcd.
    options: EtcdOptions,
    /// The bound on each call of the agents' control handle.
    control_timeout: Duration,
    /// The control handle whose writes expire with this agent's lease: its heartbeat.
    beat: EtcdStore,
    /// This agent's lease, kept alive while the agent lives: its node rank, its master
    /// address and its heartbeats are attached to it, so they go when the agent does.
    _lease: EtcdLease,
}

/// The endpoints (`--rdzv-endpoint h1:p1,h2:p2`), the job (`--rdzv-id`) and `--rdzv-conf`'s
/// TLS and user keys, as the store takes them.
fn options(
    endpoints: &str,
    job: &str,
    conf: &RdzvConf,
    timeout: Duration,
) -> Result<EtcdOptions, Error> {
    let bad = |flag: &'static str, reason: String| Error::BadFlag { flag, reason };
    let mut o = EtcdOptions::new(endpoints, job).map_err(|e| {
        let text = e.to_string();
        match text.contains("job id") {
            true => bad("--rdzv-id", text),
            false => bad("--rdzv-endpoint", text),
        }
    })?;
    o.connect_timeout = timeout;
    if conf.protocol.as_deref() == Some("https") {
        o.endpoints = o
            .endpoints
            .iter()
            .map(|e| match e.contains("://") {
                true => e.clone(),
                false => format!("https://{e}"),
            })
            .collect();
    }
    o.cacert = conf.cacert.clone();
    o.identity = match (&conf.cert, &conf.key) {
        (Some(c), Some(k)) => Some((c.clone(), k.clone())),
        (None, None) => None,
        _ => {
            return Err(bad(
                "--rdzv-conf",
                "cert and key go together (this client's certificate and its private key)".into(),
            ))
        }
    };
    o.user = match (&conf.user, &conf.password) {
        (Some(u), Some(p)) => Some((u.clone(), p.clone())),
        (None, None) => None,
        _ => {
            return Err(bad(
                "--rdzv-conf",
                "user and password go together (etcd's user and password)".into(),
            ))
        }
    };
    Ok(o)
}

/// Connects to etcd, checks that the id is this job's, takes a node rank and learns where the
/// PyTorch workers' store is. `local_addr` (`--local-addr`) is this node's address for the
/// others; without it, the address this host reaches etcd from. `grace` (the backend's
/// `store_grace`) also bounds the control handle's calls.
fn meet(options: EtcdOptions, a: &Arrival<'_>, grace: Duration) -> Result<EtcdMeeting, Error> {
    let (token, nnodes_max, me) = (&a.auth.token, a.nnodes_max, a.me.clone());
    let (local_addr, control_timeout) = (a.local_addr, a.control_timeout);
    let timeout = options.connect_timeout;
    let unreachable = |e: phalanx_store::Error| Error::Etcd {
        reason: e.to_string(),
    };
    let store = EtcdStore::connect(&options).map_err(unreachable)?;
    store.set_timeout(timeout);
    // The control handle's writes are the ones the others depend on (a rank's departure, a
    // root cause, the exit barrier): they wait out an election rather than fail in it. The
    // monitor reads through a handle bounded by one poll instead (`Met::watch`), and the
    // heartbeat through one bounded by the control timeout, so neither stalls for it.
    // Its requests are small, and a survivor waits on them: each attempt is bounded tighter
    // than the timeout's share, so that one a member will never answer (forwarded to a
    // leader that died) is sent again at once (Note [An attempt's bound] in phalanx-store).
    let ctl = store
        .with_timeout(control_timeout.max(grace))
        .with_attempt_bound(CONTROL_ATTEMPT);
    let job = options
        .prefix
        .trim_matches('/')
        .trim_start_matches("phalanx/")
        .to_string();
    // Two jobs under one id would read each other's rounds: the first one's token digest
    // holds the id.
    let digest = phalanx_core::hex::encode(
        &Sha256::digest([b"phalanx-etcd-job:".as_slice(), token].concat())[..12],
    );
    let held = store
        .compare_set(JOB, b"", digest.as_bytes())
        .map_err(unreachable)?;
    if held != digest.as_bytes() {
        return Err(Error::BadFlag {
            flag: "--rdzv-id",
            reason: format!(
                "{job:?} is already another job's in etcd at {} (its agents have another \
                 PHALANX_TOKEN): give this job its own --rdzv-id, or, if that job is over, \
                 remove its keys with `etcdctl del --prefix {}`",
                options.endpoints_text(),
                options.prefix
            ),
        });
    }
    // This agent's own keys expire with it (Note [etcd leases] in phalanx-store): a node killed
    // frees its rank, its master address and its heartbeat by itself.
    let lease = store.grant_lease(LEASE_TTL).map_err(unreachable)?;
    let own = store.with_lease(&lease);
    let node_rank = take_node_rank(&own, 0, nnodes_max, &me, timeout)?;
    store.add(AGENTS, 1).map_err(unreachable)?;
    let address = match local_addr {
        Some(a) => (a, 0)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(|a| a.ip())
            .ok_or_else(|| Error::BadFlag {
                flag: "--local-addr",
                reason: format!("{a:?} does not resolve"),
            })?,
        None => address_towards(&options.endpoints[0]),
    };
    let ip = address.to_string();
    let port = std::net::TcpListener::bind((ip.as_str(), 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::Bind {
            addr: format!("{ip}:0"),
            reason: format!("no free port for the PyTorch workers' store: {e}"),
        })?;
    // A node that came back under the same rank replaces its old address.
    own.set(&master_key(node_rank), format!("{ip} {port}").as_bytes())
        .map_err(unreachable)?;
    let master = (ip, port);
    eprintln!(
        "phalanx launch: etcd rendezvous at {} (job {job}): this is node {node_rank}",
        options.endpoints_text()
    );
    Ok(EtcdMeeting {
        beat: store.with_timeout(control_timeout).with_lease(&lease),
        store,
        ctl,
        node_rank,
        me,
        master,
        address,
        options,
        control_timeout,
        _lease: lease,
    })
}

/// `MASTER_ADDR`/`MASTER_PORT` for a round whose rank 0 is on node `node`: the address that
/// node published on arrival.
fn master_of(store: &dyn Store, node: u32) -> Result<(String, u16), Error> {
    let key = master_key(node);
    let text = store.get(&key).map_err(|e| store_err("get", &key, e))?;
    let text = String::from_utf8_lossy(&text).into_owned();
    text.split_once(' ')
        .and_then(|(a, p)| Some((a.to_string(), p.parse().ok()?)))
        .ok_or_else(|| Error::Store {
            op: "get",
            key,
            reason: format!("{text:?} is not `ADDR PORT`"),
        })
}

/// Counts this agent out; the last agent out removes the job's keys (best effort: a cluster
/// that cannot be reached keeps them, and `etcdctl del --prefix /phalanx/<id>/` removes them).
fn leave(store: &EtcdStore) {
    let (Ok(out), Ok(agents)) = (store.add(OUT, 1), store.add(AGENTS, 0)) else {
        return;
    };
    if out >= agents {
        match store.delete_prefix() {
            Ok(n) => eprintln!(
                "phalanx launch: the job's {n} keys were removed from etcd ({})",
                store.prefix()
            ),
            Err(e) => eprintln!("phalanx launch: could not remove the job's keys: {e}"),
        }
    }
}

/// The local address this host uses to reach `endpoint` (no packet is sent: a UDP socket's
/// `connect` only picks the route).
fn address_towards(endpoint: &str) -> IpAddr {
    let bare = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    bare.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .and_then(|to| {
            let s = UdpSocket::bind(("0.0.0.0", 0)).ok()?;
            s.connect(to).ok()?;
            s.local_addr().ok().map(|a| a.ip())
        })
        .unwrap_or(IpAddr::from([127, 0, 0, 1]))
}
