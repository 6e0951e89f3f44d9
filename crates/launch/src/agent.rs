//! The node agent: hosts or joins the store, runs rendezvous rounds, starts the local workers
//! and restarts them after a failure while `--max-restarts` allows.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use phalanx_core::Timeout;
use phalanx_store::{Auth, ServerConfig, Store, StoreServer, TcpStore, TorchClients};
use sha2::{Digest, Sha256};

use crate::elastic::coordinate::Coordinator;
use crate::elastic::links::Links;
use crate::rdzv::{self, Host, Meeting};
use crate::round::{End, Job};
use crate::signals;
use crate::{Error, LaunchArgs};

/// Exit code of `phalanx launch` when the group failed again after `--max-restarts K > 0`
/// restarts ("failed after K restarts"). Without restarts the launcher exits with the failing
/// worker's own code (or 128 + its signal); after a signal to the agent, 128 + that signal.
pub const EXIT_RESTARTS_EXHAUSTED: u8 = 125;

/// Start-up failures in a row that may restart the group without using up `--max-restarts`;
/// past this, a program that cannot start at all fails like any other.
pub(crate) const MAX_STARTUP_FAILURES: u32 = 3;

/// Bound on each store call of the agents' control handle ([`Coordinator`]).
pub(crate) const CONTROL_TIMEOUT: Duration = Duration::from_secs(1);

/// One node's agent for the whole job.
pub(crate) struct Agent<'a> {
    /// What each round starts from.
    job: Job<'a>,
    /// This node's side of the conversation with the other agents.
    coord: Coordinator,
    /// The node rank this agent took on arrival (c10d) and its identity, given back when it
    /// ends (Note [c10d node ranks]).
    arrival: Option<(u32, String)>,
    /// The store, hosted here on node 0 (kept alive until the agent ends).
    _server: Option<StoreServer>,
    /// The job's keys in etcd (`--rdzv-backend etcd`): the last agent out removes them.
    etcd: Option<phalanx_store::EtcdStore>,
}

impl<'a> Agent<'a> {
    /// Hosts the store (node 0), connects to it (other nodes) or to etcd, as the rendezvous
    /// flags say (`rdzv/`).
    pub(crate) fn start(
        args: &'a LaunchArgs,
        program: &'a [OsString],
        signature: String,
    ) -> anyhow::Result<Self> {
        // Note [A launch plan resolved once]: the flags stay as given; what the rendezvous
        // decides (the node rank taken on arrival) and what `--rdzv-conf` overrides are the
        // job's own fields, not rewritten flags.
        let mut node_rank = args.node_rank();
        let timeout = match args.rdzv_conf.join_timeout {
            Some(t) => t,
            None => Timeout::from_env()?,
        };
        for note in args.rdzv_conf.unused_notes() {
            eprintln!("phalanx launch: {note}");
        }
        let last_call = args.rdzv_conf.last_call.unwrap_or(args.rdzv_last_call);
        let token = if args.nnodes.max > 1 {
            let t = Auth::from_env().token;
            if t.is_empty() {
                return Err(Error::MissingToken {
                    nnodes: args.nnodes.max,
                }
                .into());
            }
            t
        } else {
            Auth::random("").token
        };
        let run_id = match &args.run_id {
            Some(id) => id.clone(),
            // Every node derives the same id from the shared secret without revealing it.
            None if args.nnodes.max > 1 => phalanx_core::hex::encode(
                &Sha256::digest([b"phalanx-run-id:".as_slice(), &token].concat())[..6],
            ),
            None => phalanx_core::hex::encode(&Auth::random("").token[..6]),
        };
        let auth = Auth::new(run_id.clone(), token);
        let meeting = Meeting::from_spelling(&args.spelling(), &|k| {
            std::env::var(k).ok().filter(|v| !v.is_empty())
        })?;
        let (mut master_addr, requested) = (meeting.addr.clone(), meeting.port);
        let mut etcd = None;
        let local_ifname = match &args.local_addr {
            Some(a) => Some(interface_of(a)?),
            None => None,
        };
        let host = rdzv::hostname();
        let nonce = phalanx_core::hex::encode(&Auth::random("").token[..8]);
        let mut arrival = None;
        // Note [Two protocols on one port] (phalanx-store): PyTorch workers reach this store
        // too; from other hosts only when asked, since their protocol cannot authenticate.
        let torch = match args.torch_store {
            true => TorchClients::Anyone,
            false => TorchClients::Loopback,
        };
        let hosted = match meeting.host {
            Host::There | Host::Etcd => None,
            host => {
                let addr = rdzv::resolve(&master_addr, requested, timeout, &signals::pending)?;
                rdzv::warn_loopback_store(&master_addr, addr, args.nnodes.max);
                let config = ServerConfig::default().with_torch_clients(torch);
                match StoreServer::bind_with(addr, auth.clone(), config) {
                    Ok(server) => Some(server),
                    // Another agent on this machine bound the endpoint first: it hosts, this
                    // one joins (torchrun's c10d backend falls back to a client the same way).
                    Err(phalanx_store::Error::Bind { source, .. })
                        if host == Host::HereIfFree
                            && source.kind() == std::io::ErrorKind::AddrInUse =>
                    {
                        None
                    }
                    Err(e) => {
                        return Err(Error::Bind {
                            addr: addr.to_string(),
                            reason: e.to_string(),
                        }
                        .into())
                    }
                }
            }
        };
        #[allow(clippy::type_complexity)]
        let (server, store, ctl, master_port): (
            Option<StoreServer>,
            Arc<dyn Store>,
            Arc<dyn Store>,
            u16,
        ) = if meeting.host == Host::Etcd {
            let options = rdzv::etcd::options(&meeting.addr, &run_id, &args.rdzv_conf, timeout)?;
            let m = rdzv::etcd::meet(
                options,
                &auth.token,
                args.nnodes.max,
                format!("{host} {nonce}"),
                args.local_addr.as_deref(),
                CONTROL_TIMEOUT,
            )?;
            node_rank = m.node_rank;
            arrival = Some((m.node_rank, m.me.clone()));
            master_addr = m.master.0.clone();
            let store: Arc<dyn Store> = Arc::new(m.store.clone());
            let ctl: Arc<dyn Store> = Arc::new(m.ctl.clone());
            let port = m.master.1;
            etcd = Some(m);
            (None, store, ctl, port)
        } else if let Some(server) = hosted {
            let addr = server.local_addr();
            if args.torch_store && !addr.ip().is_loopback() {
                eprintln!(
                    "phalanx launch: --torch-store: the store at {addr} serves PyTorch's \
                     TCPStore protocol, which has no authentication, to every host that \
                     reaches the port: they can read and write the PyTorch workers' keys"
                );
            }
            let port = addr.port();
            let store: Arc<dyn Store> = Arc::new(server.local_store());
            if meeting.ranks_on_arrival {
                node_rank = 0;
            }
            (Some(server), store.clone(), store, port)
        } else {
            let addr = format!("{master_addr}:{requested}");
            let store =
                TcpStore::connect(&addr, &auth, timeout).map_err(|e| Error::Unreachable {
                    addr: addr.clone(),
                    waited_s: timeout.as_secs_f64(),
                    reason: e.to_string(),
                })?;
            let ctl = TcpStore::connect(&addr, &auth, CONTROL_TIMEOUT).map_err(|e| {
                Error::Unreachable {
                    addr: addr.clone(),
                    waited_s: CONTROL_TIMEOUT.as_secs_f64(),
                    reason: e.to_string(),
                }
            })?;
            if meeting.ranks_on_arrival {
                let me = format!("{host} {nonce}");
                let k = rdzv::take_node_rank(&store, 1, args.nnodes.max, &me, timeout)?;
                eprintln!("phalanx launch: c10d rendezvous at {addr}: this is node {k}");
                node_rank = k;
                arrival = Some((k, me));
            }
            (None, Arc::new(store), Arc::new(ctl), requested)
        };
        let set_omp = args.nproc_per_node > 1 && std::env::var_os("OMP_NUM_THREADS").is_none();
        if set_omp {
            eprintln!("{}", crate::worker_env::OMP_WARNING);
        }
        let mut coord = Coordinator::new(
            ctl.clone(),
            args.nnodes.max,
            node_rank,
            host.clone(),
            timeout,
            args.monitor_interval,
        );
        // Under etcd any node may be lost, node 0 included: links tell the others at once
        // (Note [Agent links]).
        if let Some(m) = &etcd {
            match Links::start(&*ctl, node_rank, m.address) {
                Ok(links) => coord = coord.with_links(links),
                Err(e) => eprintln!(
                    "phalanx launch: no link to the other agents ({e}); a lost node is noticed \
                     by its heartbeat alone"
                ),
            }
        }
        let job = Job {
            args,
            node_rank,
            last_call,
            program,
            signature,
            run_id,
            token_hex: auth.token_hex(),
            master_addr,
            master_port,
            host,
            nonce,
            local_ifname,
            set_omp,
            store,
            etcd: etcd.as_ref().map(|m| m.options.clone()),
            timeout,
            restarts_used: Default::default(),
        };
        Ok(Agent {
            job,
            coord,
            arrival,
            _server: server,
            etcd: etcd.map(|m| m.store),
        })
    }

    /// Runs rounds until the job succeeds, is stopped, or fails with no restart left.
    pub(crate) fn run(&self) -> anyhow::Result<ExitCode> {
        let k = self.job.args.max_restarts;
        let (mut round, mut startup_in_a_row) = (0u32, 0u32);
        loop {
            let (ran, end) = self.job.run_round(&self.coord, round)?;
            // Elastic rounds are numbered by the store (Note [Elastic rounds]).
            round = ran;
            match end {
                End::Success => return Ok(ExitCode::SUCCESS),
                // A membership change, not a failure: torchrun does not count it either.
                End::Rejoin => round += 1,
                End::Signal(sig) => return Ok(ExitCode::from(128 + sig as u8)),
                End::Failed(cause) => {
                    if !cause.restartable || k == 0 {
                        return Ok(ExitCode::from(cause.code));
                    }
                    if cause.startup && startup_in_a_row < MAX_STARTUP_FAILURES {
                        startup_in_a_row += 1;
                        eprintln!(
                            "phalanx launch: start-up failure {startup_in_a_row} of at most \
                             {MAX_STARTUP_FAILURES} in a row (within --startup-window {:?}); it \
                             does not count against --max-restarts {k}; starting attempt {}",
                            self.job.args.startup_window,
                            round + 1
                        );
                    } else if self.job.restarts_used.get() < k {
                        let used = self.job.restarts_used.get() + 1;
                        self.job.restarts_used.set(used);
                        // Only a round that got past its start-up window resets the count, so
                        // a program that never starts cannot earn free restarts forever.
                        if !cause.startup {
                            startup_in_a_row = 0;
                        }
                        eprintln!(
                            "phalanx launch: restart {used} of --max-restarts {k}: starting attempt {}",
                            round + 1
                        );
                    } else {
                        eprintln!(
                            "phalanx launch: failed after {k} restarts; last root cause: {}",
                            cause.headline()
                        );
                        return Ok(ExitCode::from(EXIT_RESTARTS_EXHAUSTED));
                    }
                    round += 1;
                }
            }
        }
    }
}

impl Drop for Agent<'_> {
    /// Gives back the node rank taken on arrival, through the control handle (bounded to
    /// `CONTROL_TIMEOUT`; nothing when node 0's store is lost), so that an agent whose job
    /// failed does not wait out the rendezvous timeout on its way out; under etcd, counts
    /// itself out (the last one out removes the job's keys) unless etcd stopped answering.
    fn drop(&mut self) {
        if let (Some((k, me)), Some(store)) = (&self.arrival, self.coord.store()) {
            rdzv::give_back_node_rank(store, *k, me);
        }
        if let Some(store) = &self.etcd {
            // A cluster that stopped answering (its quorum lost) would hold every call for
            // PHALANX_TIMEOUT: the keys stay, and the agent says how to remove them.
            match self.coord.store() {
                Some(_) => rdzv::etcd::leave(&store.with_timeout(CONTROL_TIMEOUT * 2)),
                None => eprintln!(
                    "phalanx launch: etcd does not answer: the job's keys stay under {} \
                     (`etcdctl del --prefix {}` removes them)",
                    store.prefix(),
                    store.prefix()
                ),
            }
        }
    }
}

/// The interface that holds `--local-addr` (an address or a name resolving to one), for the
/// workers' `PHALANX_SOCKET_IFNAME`.
fn interface_of(addr: &str) -> Result<String, Error> {
    use std::net::ToSocketAddrs;
    let bad = |reason: String| Error::BadFlag {
        flag: "--local-addr",
        reason,
    };
    let ips: Vec<std::net::IpAddr> = (addr, 0)
        .to_socket_addrs()
        .map_err(|e| bad(format!("{addr:?} does not resolve: {e}")))?
        .map(|a| a.ip())
        .collect();
    let ifaces = if_addrs::get_if_addrs().unwrap_or_default();
    ifaces
        .iter()
        .find(|i| ips.contains(&i.ip()))
        .map(|i| i.name.clone())
        .ok_or_else(|| {
            let held: Vec<String> = ifaces
                .iter()
                .map(|i| format!("{} {}", i.name, i.ip()))
                .collect();
            bad(format!(
                "{addr:?} ({ips:?}) is not an address of this machine (its interfaces: {})",
                held.join(", ")
            ))
        })
}
