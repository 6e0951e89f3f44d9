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
//! starts without it has its TCPStore on node 1 (Note [No node is special] in `round.rs`).
//!
//! ```
//! use phalanx_launch::RdzvBackend;
//! assert_eq!("etcd".parse::<RdzvBackend>().unwrap(), RdzvBackend::Etcd);
//! assert_eq!("etcd-v3".parse::<RdzvBackend>().unwrap(), RdzvBackend::Etcd);
//! assert!("etcd-v2".parse::<RdzvBackend>().unwrap_err().contains("3.6 removed"));
//! ```

use std::net::{IpAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

use phalanx_store::{EtcdOptions, EtcdStore, Store};
use sha2::{Digest, Sha256};

use super::node_rank::take_node_rank;
use super::RdzvConf;
use crate::Error;

const JOB: &str = "rdzv/etcd/job";
/// `rdzv/etcd/master/<node rank>`: that node's address and port for the PyTorch TCPStore.
fn master_key(node: u32) -> String {
    format!("rdzv/etcd/master/{node}")
}
const AGENTS: &str = "rdzv/etcd/agents";
const OUT: &str = "rdzv/etcd/out";

/// This agent's place in an etcd-backed job.
pub(crate) struct EtcdMeeting {
    /// The job's keys, bounded by the rendezvous timeout.
    pub(crate) store: EtcdStore,
    /// The same keys, each call bounded by the control timeout (the coordinator's handle).
    pub(crate) ctl: EtcdStore,
    /// The node rank taken on arrival, and the identity that holds it.
    pub(crate) node_rank: u32,
    pub(crate) me: String,
    /// This node's `MASTER_ADDR`/`MASTER_PORT` for the PyTorch workers' TCPStore, used in
    /// the rounds whose rank 0 it holds ([`master_of`]).
    pub(crate) master: (String, u16),
    /// This node's address for the others (`--local-addr`, else the one it reaches etcd from).
    pub(crate) address: IpAddr,
    /// What the workers need to reach etcd.
    pub(crate) options: EtcdOptions,
}

/// The endpoints (`--rdzv-endpoint h1:p1,h2:p2`), the job (`--rdzv-id`) and `--rdzv-conf`'s
/// TLS and user keys, as the store takes them.
pub(crate) fn options(
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
/// others; without it, the address this host reaches etcd from.
pub(crate) fn meet(
    options: EtcdOptions,
    token: &[u8],
    nnodes_max: u32,
    me: String,
    local_addr: Option<&str>,
    control_timeout: Duration,
) -> Result<EtcdMeeting, Error> {
    let timeout = options.connect_timeout;
    let unreachable = |e: phalanx_store::Error| Error::Etcd {
        reason: e.to_string(),
    };
    let store = EtcdStore::connect(&options).map_err(unreachable)?;
    store.set_timeout(timeout);
    let ctl = store.with_timeout(control_timeout);
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
    let node_rank = take_node_rank(&store, 0, nnodes_max, &me, timeout)?;
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
    store
        .set(&master_key(node_rank), format!("{ip} {port}").as_bytes())
        .map_err(unreachable)?;
    let master = (ip, port);
    eprintln!(
        "phalanx launch: etcd rendezvous at {} (job {job}): this is node {node_rank}",
        options.endpoints_text()
    );
    Ok(EtcdMeeting {
        store,
        ctl,
        node_rank,
        me,
        master,
        address,
        options,
    })
}

/// `MASTER_ADDR`/`MASTER_PORT` for a round whose rank 0 is on node `node`: the address that
/// node published on arrival.
pub(crate) fn master_of(store: &dyn Store, node: u32) -> Result<(String, u16), Error> {
    let key = master_key(node);
    let text = store
        .get(&key)
        .map_err(|e| crate::rendezvous::store_err("get", &key, e))?;
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
pub(crate) fn leave(store: &EtcdStore) {
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
