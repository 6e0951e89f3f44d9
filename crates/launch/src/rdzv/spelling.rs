//! The torchrun spellings of a rendezvous, read in one place: `--rdzv-backend`,
//! `--rdzv-endpoint`, `--rdzv-conf`, `--standalone`, `--master-addr`/`--master-port` and the
//! Kubeflow variables. [`Meeting::from_spelling`] turns them into where this agent meets the
//! others; the backends (`static_tcp.rs`, `c10d.rs`, `etcd.rs`) do the meeting.
//!
//! ```
//! use phalanx_launch::{RdzvBackend, RdzvConf};
//! assert_eq!("c10d".parse::<RdzvBackend>().unwrap(), RdzvBackend::C10d);
//! assert_eq!("etcd".parse::<RdzvBackend>().unwrap(), RdzvBackend::Etcd);
//! assert!("etcd-v2".parse::<RdzvBackend>().unwrap_err().contains("3.6 removed"));
//! let conf: RdzvConf = "timeout=900,last_call_timeout=5,is_host=1".parse().unwrap();
//! assert_eq!(conf.join_timeout.unwrap().as_secs(), 900);
//! assert_eq!(conf.is_host, Some(true));
//! assert!("colour=blue".parse::<RdzvConf>().unwrap_err().contains("colour"));
//! ```

use std::str::FromStr;
use std::time::Duration;

use super::machine::is_this_machine;
use crate::Error;
/// The port of a c10d endpoint given without one (torchrun's default).
pub const C10D_DEFAULT_PORT: u16 = 29400;

/// `--rdzv-backend`: how the agents meet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RdzvBackend {
    /// Node 0 hosts the store at the master address; every node gives its `--node-rank`.
    #[default]
    Static,
    /// The node at `--rdzv-endpoint` hosts the store; the others take node ranks on arrival.
    C10d,
    /// An etcd cluster at `--rdzv-endpoint` holds the store; every node takes its rank on
    /// arrival.
    Etcd,
}

impl FromStr for RdzvBackend {
    type Err = String;

    fn from_str(text: &str) -> Result<RdzvBackend, String> {
        match text.trim() {
            "static" => Ok(RdzvBackend::Static),
            "c10d" => Ok(RdzvBackend::C10d),
            "etcd" | "etcd-v3" => Ok(RdzvBackend::Etcd),
            "etcd-v2" => Err(
                "\"etcd-v2\" speaks etcd's v2 API, which etcd 3.6 removed (and 3.4 and 3.5 serve \
                 only when started with --enable-v2): use `etcd`, which speaks the v3 API"
                    .into(),
            ),
            other => Err(format!(
                "{other:?} is not a rendezvous backend (accepted: static, c10d, etcd)"
            )),
        }
    }
}

/// `--rdzv-conf K=V,...`: the keys of torchrun's rendezvous configuration that apply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RdzvConf {
    /// `timeout` / `join_timeout`: how long an agent waits for the store and the other nodes
    /// (instead of `PHALANX_TIMEOUT`).
    pub join_timeout: Option<Duration>,
    /// `last_call_timeout`: `--rdzv-last-call`.
    pub last_call: Option<Duration>,
    /// `is_host`: whether this node hosts the store (c10d), instead of comparing addresses.
    pub is_host: Option<bool>,
    /// `protocol` (etcd): `http` or `https` for endpoints given without a scheme.
    pub protocol: Option<String>,
    /// `cacert` (etcd): the PEM certificate of the authority that signed the members'.
    pub cacert: Option<std::path::PathBuf>,
    /// `cert` and `key` (etcd): this client's PEM certificate and private key.
    pub cert: Option<std::path::PathBuf>,
    /// See `cert`.
    pub key: Option<std::path::PathBuf>,
    /// `user` (or `username`) and `password` (etcd): etcd's authentication.
    pub user: Option<String>,
    /// See `user`.
    pub password: Option<String>,
    /// `quorum_timeout` (etcd, phalanx's own): how long the cluster may answer nothing (an
    /// election, a lost quorum) before the agents call the job's store lost; 5 s when not
    /// given (Note [An election is not a lost store]).
    pub quorum_timeout: Option<Duration>,
    /// torchrun's keys that were given and that phalanx does not use.
    pub unused: Vec<&'static str>,
}

/// Keys torchrun knows that phalanx has no use for, each with why.
const IGNORED_KEYS: [(&str, &str); 6] = [
    (
        "read_timeout",
        "store reads use PHALANX_TIMEOUT's progress rule",
    ),
    (
        "close_timeout",
        "node 0 waits for every node's exit barrier",
    ),
    ("keep_alive_interval", "agents heartbeat every 1 s"),
    (
        "keep_alive_max_attempt",
        "a node is lost after 5 s without a heartbeat",
    ),
    (
        "use_libuv",
        "phalanx's store is its own server, not libuv's",
    ),
    (
        "store_type",
        "phalanx's store speaks phalanx's and PyTorch's protocols",
    ),
];

impl FromStr for RdzvConf {
    type Err = String;

    fn from_str(text: &str) -> Result<RdzvConf, String> {
        let mut conf = RdzvConf::default();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not KEY=VALUE"))?;
            let (key, value) = (key.trim(), value.trim());
            let secs =
                || phalanx_core::parse_duration(value).map_err(|e| format!("{key}={value}: {e}"));
            match key {
                "timeout" | "join_timeout" => conf.join_timeout = Some(secs()?),
                "last_call_timeout" => conf.last_call = Some(secs()?),
                "is_host" => {
                    conf.is_host = Some(match value.to_ascii_lowercase().as_str() {
                        "1" | "true" | "yes" => true,
                        "0" | "false" | "no" => false,
                        _ => return Err(format!("is_host={value}: expected true or false")),
                    })
                }
                "protocol" => {
                    conf.protocol = Some(match value {
                        "http" | "https" => value.to_string(),
                        _ => return Err(format!("protocol={value}: expected http or https")),
                    })
                }
                "cacert" => conf.cacert = Some(value.into()),
                "cert" => conf.cert = Some(value.into()),
                "key" => conf.key = Some(value.into()),
                "user" | "username" => conf.user = Some(value.to_string()),
                "password" => conf.password = Some(value.to_string()),
                "quorum_timeout" => conf.quorum_timeout = Some(secs()?),
                k if IGNORED_KEYS.iter().any(|(i, _)| *i == k) => {
                    let (name, _) = IGNORED_KEYS.iter().find(|(i, _)| *i == k).expect("found");
                    conf.unused.push(name);
                }
                other => {
                    let known: Vec<&str> = [
                        "timeout",
                        "join_timeout",
                        "last_call_timeout",
                        "is_host",
                        "protocol",
                        "cacert",
                        "cert",
                        "key",
                        "user",
                        "username",
                        "password",
                        "quorum_timeout",
                    ]
                    .into_iter()
                    .chain(IGNORED_KEYS.iter().map(|(k, _)| *k))
                    .collect();
                    return Err(format!(
                        "unknown key {other:?} (known: {})",
                        known.join(", ")
                    ));
                }
            }
        }
        Ok(conf)
    }
}

impl RdzvConf {
    /// The etcd keys given (`protocol`, `cacert`, `cert`, `key`, `user`, `password`,
    /// `quorum_timeout`), which
    /// only `--rdzv-backend etcd` uses.
    pub(crate) fn etcd_keys(&self) -> Vec<&'static str> {
        [
            ("protocol", self.protocol.is_some()),
            ("cacert", self.cacert.is_some()),
            ("cert", self.cert.is_some()),
            ("key", self.key.is_some()),
            ("user", self.user.is_some()),
            ("password", self.password.is_some()),
            ("quorum_timeout", self.quorum_timeout.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, given)| given.then_some(k))
        .collect()
    }

    /// A note for each key given that phalanx accepts but does not use, one line each.
    pub(crate) fn unused_notes(&self) -> Vec<String> {
        self.unused
            .iter()
            .filter_map(|k| IGNORED_KEYS.iter().find(|(i, _)| i == k))
            .map(|(k, why)| format!("--rdzv-conf {k}: not used ({why})"))
            .collect()
    }
}

/// `--master-addr`'s default.
pub(crate) const DEFAULT_MASTER_ADDR: &str = "127.0.0.1";
/// `--master-port`'s default (torchrun's).
pub(crate) const DEFAULT_MASTER_PORT: u16 = 29500;

/// The rendezvous flags of `phalanx launch`, as [`Meeting`] reads them
/// (`LaunchArgs::spelling`).
#[derive(Clone, Debug)]
pub(crate) struct Spelling {
    pub(crate) backend: RdzvBackend,
    pub(crate) endpoint: Option<String>,
    /// `--rdzv-conf is_host`.
    pub(crate) is_host: Option<bool>,
    pub(crate) standalone: bool,
    pub(crate) node_rank: Option<u32>,
    /// `MAX` of `--nnodes`.
    pub(crate) nnodes_max: u32,
    pub(crate) master_addr: String,
    pub(crate) master_port: u16,
}

impl Default for Spelling {
    /// The flags' defaults: static, one node, 127.0.0.1:29500.
    fn default() -> Self {
        Spelling {
            backend: RdzvBackend::Static,
            endpoint: None,
            is_host: None,
            standalone: false,
            node_rank: None,
            nnodes_max: 1,
            master_addr: DEFAULT_MASTER_ADDR.into(),
            master_port: DEFAULT_MASTER_PORT,
        }
    }
}

/// Who hosts the store, as the flags say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Host {
    /// This node (static node 0, `is_host=1`, standalone).
    Here,
    /// Another node.
    There,
    /// This node unless another agent on this machine bound the endpoint first (c10d with an
    /// endpoint that is one of this machine's addresses: the first agent to bind hosts, the
    /// others join it).
    HereIfFree,
    /// No node: an etcd cluster holds the store (`addr` is its endpoints).
    Etcd,
}

/// Where this node's agent meets the others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Meeting {
    /// The store's host as given (what workers get as `MASTER_ADDR`).
    pub(crate) addr: String,
    /// Its port (0: a free one, `--standalone`).
    pub(crate) port: u16,
    pub(crate) host: Host,
    /// Whether node ranks are taken on arrival (c10d) rather than given.
    pub(crate) ranks_on_arrival: bool,
}

impl Meeting {
    /// Reads the flags (and `MASTER_ADDR`/`MASTER_PORT` through `var`, for static multi-node
    /// jobs left at the default address).
    pub(crate) fn from_spelling(
        args: &Spelling,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Meeting, Error> {
        if args.standalone {
            return Ok(Meeting {
                addr: "127.0.0.1".into(),
                port: 0,
                host: Host::Here,
                ranks_on_arrival: false,
            });
        }
        if args.backend == RdzvBackend::Etcd {
            let Some(endpoints) = args.endpoint.clone().filter(|e| !e.trim().is_empty()) else {
                return Err(Error::BadFlag {
                    flag: "--rdzv-backend",
                    reason: "etcd needs --rdzv-endpoint HOST:PORT[,HOST:PORT…], the client \
                             endpoints of the etcd cluster's members"
                        .into(),
                });
            };
            if args.node_rank.is_some() && args.nnodes_max > 1 {
                eprintln!(
                    "phalanx launch: --rdzv-backend etcd: --node-rank is ignored (node ranks \
                     are given in order of arrival), as torchrun ignores it"
                );
            }
            return Ok(Meeting {
                addr: endpoints,
                port: 0,
                host: Host::Etcd,
                ranks_on_arrival: true,
            });
        }
        let endpoint = match &args.endpoint {
            Some(e) => Some(
                split_endpoint(e, args.backend).map_err(|reason| Error::BadFlag {
                    flag: "--rdzv-endpoint",
                    reason,
                })?,
            ),
            None => None,
        };
        match args.backend {
            RdzvBackend::Static => {
                let (addr, port) = match endpoint {
                    Some(e) => e,
                    None => master_from_env(args, var),
                };
                let host = match args.node_rank.unwrap_or(0) {
                    0 => Host::Here,
                    _ => Host::There,
                };
                Ok(Meeting {
                    addr,
                    port,
                    host,
                    ranks_on_arrival: false,
                })
            }
            RdzvBackend::Etcd => unreachable!("answered above"),
            RdzvBackend::C10d => {
                let Some((addr, port)) = endpoint else {
                    return Err(Error::BadFlag {
                        flag: "--rdzv-backend",
                        reason: "c10d needs --rdzv-endpoint HOST[:PORT], the address of the \
                                 node that hosts the rendezvous"
                            .into(),
                    });
                };
                if args.node_rank.is_some() && args.nnodes_max > 1 {
                    eprintln!(
                        "phalanx launch: --rdzv-backend c10d: --node-rank is ignored (node ranks \
                         are given in order of arrival, the host of {addr} is node 0), as \
                         torchrun ignores it"
                    );
                }
                let host = match args.is_host {
                    Some(true) => Host::Here,
                    Some(false) => Host::There,
                    None if args.nnodes_max == 1 => Host::Here,
                    None if is_this_machine(&addr) => Host::HereIfFree,
                    None => Host::There,
                };
                Ok(Meeting {
                    addr,
                    port,
                    host,
                    ranks_on_arrival: args.nnodes_max > 1,
                })
            }
        }
    }
}

/// `HOST[:PORT]` (`[v6]:PORT` for IPv6) of `--rdzv-endpoint`; a missing port is c10d's 29400,
/// or static's `--master-port` default 29500.
fn split_endpoint(text: &str, backend: RdzvBackend) -> Result<(String, u16), String> {
    let default = match backend {
        RdzvBackend::C10d | RdzvBackend::Etcd => C10D_DEFAULT_PORT,
        RdzvBackend::Static => DEFAULT_MASTER_PORT,
    };
    let text = text.trim();
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("{text:?}: an IPv6 address needs its closing `]`"))?;
        (h, after.strip_prefix(':'))
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            _ => (text, None),
        }
    };
    if host.is_empty() {
        return Err(format!(
            "{text:?} has no host (HOST[:PORT], e.g. node1:29400)"
        ));
    }
    let port = match port {
        None => default,
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| format!("{text:?}: {p:?} is not a port (HOST[:PORT])"))?,
    };
    Ok((host.to_string(), port))
}

/// `--master-addr`/`--master-port`, except that a multi-node agent left at the defaults takes
/// `MASTER_ADDR`/`MASTER_PORT` from its environment when no `PET_MASTER_*` is set: Kubeflow's
/// PyTorchJob sets those (and `PET_NNODES`, `PET_NODE_RANK`) but not `PET_MASTER_ADDR`.
pub(crate) fn master_from_env(
    args: &Spelling,
    var: &dyn Fn(&str) -> Option<String>,
) -> (String, u16) {
    let (mut addr, mut port) = (args.master_addr.clone(), args.master_port);
    if args.nnodes_max > 1 {
        if addr == DEFAULT_MASTER_ADDR && var("PET_MASTER_ADDR").is_none() {
            if let Some(a) = var("MASTER_ADDR") {
                eprintln!("phalanx launch: using MASTER_ADDR={a} from the environment");
                addr = a;
            }
        }
        if port == DEFAULT_MASTER_PORT && var("PET_MASTER_PORT").is_none() {
            if let Some(p) = var("MASTER_PORT").and_then(|p| p.parse().ok()) {
                port = p;
            }
        }
    }
    (addr, port)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: impl FnOnce(&mut Spelling)) -> Spelling {
        let mut a = Spelling::default();
        extra(&mut a);
        a
    }

    #[test]
    fn endpoints() {
        let c = RdzvBackend::C10d;
        assert_eq!(split_endpoint("node1", c).unwrap(), ("node1".into(), 29400));
        assert_eq!(
            split_endpoint("node1:1234", c).unwrap(),
            ("node1".into(), 1234)
        );
        assert_eq!(
            split_endpoint("[::1]:29401", c).unwrap(),
            ("::1".into(), 29401)
        );
        assert_eq!(split_endpoint("::1", c).unwrap(), ("::1".into(), 29400));
        assert_eq!(split_endpoint("h", RdzvBackend::Static).unwrap().1, 29500);
        assert!(split_endpoint("h:port", c).unwrap_err().contains("port"));
        assert!(split_endpoint(":29400", c).unwrap_err().contains("no host"));
    }

    #[test]
    fn meetings() {
        let none = |_: &str| None;
        // c10d: the endpoint names the host; ranks on arrival.
        let m = Meeting::from_spelling(
            &args(|a| {
                a.backend = RdzvBackend::C10d;
                a.endpoint = Some("localhost:29999".into());
                a.nnodes_max = 2;
            }),
            &none,
        )
        .unwrap();
        assert_eq!((m.addr.as_str(), m.port), ("localhost", 29999));
        assert_eq!(m.host, Host::HereIfFree);
        assert!(m.ranks_on_arrival);
        let m = Meeting::from_spelling(
            &args(|a| {
                a.backend = RdzvBackend::C10d;
                a.endpoint = Some("192.0.2.7".into());
                a.nnodes_max = 2;
            }),
            &none,
        )
        .unwrap();
        assert_eq!((m.host, m.port), (Host::There, 29400));
        // is_host decides over addresses.
        let m = Meeting::from_spelling(
            &args(|a| {
                a.backend = RdzvBackend::C10d;
                a.endpoint = Some("192.0.2.7".into());
                a.is_host = Some(true);
                a.nnodes_max = 2;
            }),
            &none,
        )
        .unwrap();
        assert_eq!(m.host, Host::Here);
        // c10d without an endpoint is named.
        let e = Meeting::from_spelling(&args(|a| a.backend = RdzvBackend::C10d), &none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--rdzv-endpoint"), "{e}");
        // static: the endpoint stands for the master address; node 1 is a client.
        let m = Meeting::from_spelling(
            &args(|a| {
                a.endpoint = Some("10.0.0.1:29600".into());
                a.node_rank = Some(1);
                a.nnodes_max = 2;
            }),
            &none,
        )
        .unwrap();
        assert_eq!(
            (m.addr.as_str(), m.port, m.host),
            ("10.0.0.1", 29600, Host::There)
        );
        assert!(!m.ranks_on_arrival);
        // standalone wins.
        let m = Meeting::from_spelling(&args(|a| a.standalone = true), &none).unwrap();
        assert_eq!((m.port, m.host), (0, Host::Here));
    }

    #[test]
    fn kubeflow_master_variables_fill_in_defaults() {
        let env = |k: &str| match k {
            "MASTER_ADDR" => Some("job-master-0".to_string()),
            "MASTER_PORT" => Some("23456".to_string()),
            _ => None,
        };
        let multi = Spelling {
            nnodes_max: 2,
            ..Spelling::default()
        };
        assert_eq!(
            master_from_env(&multi, &env),
            ("job-master-0".into(), 23456)
        );
        // Explicit values and single-node jobs keep their own.
        let explicit = Spelling {
            master_addr: "10.0.0.1".into(),
            master_port: 29600,
            ..multi.clone()
        };
        assert_eq!(master_from_env(&explicit, &env), ("10.0.0.1".into(), 29600));
        let single = Spelling::default();
        assert_eq!(master_from_env(&single, &env), ("127.0.0.1".into(), 29500));
        // PET_MASTER_ADDR (already in --master-addr through clap) wins over MASTER_ADDR.
        let pet = |k: &str| {
            (k == "PET_MASTER_ADDR")
                .then(|| "127.0.0.1".to_string())
                .or(env(k))
        };
        assert_eq!(master_from_env(&multi, &pet).0, "127.0.0.1");
    }

    #[test]
    fn backends_and_conf() {
        assert_eq!(
            "static".parse::<RdzvBackend>().unwrap(),
            RdzvBackend::Static
        );
        let e = "etcd-v2".parse::<RdzvBackend>().unwrap_err();
        assert!(e.contains("etcd-v2") && e.contains("use `etcd`"), "{e}");
        assert!("zk"
            .parse::<RdzvBackend>()
            .unwrap_err()
            .contains("static, c10d, etcd"));
        let c: RdzvConf = "cacert=/ca.pem,user=root,password=pw,protocol=https"
            .parse()
            .unwrap();
        assert_eq!(c.etcd_keys(), ["protocol", "cacert", "user", "password"]);
        let c: RdzvConf = "quorum_timeout=3s".parse().unwrap();
        assert_eq!(c.quorum_timeout, Some(Duration::from_secs(3)));
        assert_eq!(c.etcd_keys(), ["quorum_timeout"]);
        assert!("quorum_timeout=soon"
            .parse::<RdzvConf>()
            .unwrap_err()
            .contains("quorum_timeout=soon"));
        assert!("protocol=ftp"
            .parse::<RdzvConf>()
            .unwrap_err()
            .contains("http or https"));
        let c: RdzvConf = "join_timeout=10s, use_libuv=1".parse().unwrap();
        assert_eq!(c.join_timeout, Some(Duration::from_secs(10)));
        assert_eq!(
            c.unused_notes(),
            ["--rdzv-conf use_libuv: not used (phalanx's store is its own server, not libuv's)"]
        );
        assert!("timeout"
            .parse::<RdzvConf>()
            .unwrap_err()
            .contains("KEY=VALUE"));
        assert!("timeout=0"
            .parse::<RdzvConf>()
            .unwrap_err()
            .contains("timeout=0"));
        assert!("is_host=maybe"
            .parse::<RdzvConf>()
            .unwrap_err()
            .contains("is_host"));
        assert_eq!("".parse::<RdzvConf>().unwrap(), RdzvConf::default());
    }
}
