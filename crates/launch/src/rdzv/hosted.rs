//! A store that one agent hosts and the others reach over TCP (`static` and `c10d`).

use std::sync::Arc;
use std::time::Duration;

use phalanx_store::{ServerConfig, Store, StoreServer, TcpStore, TorchClients};

use super::backend::{Arrival, Met};
use super::machine::{resolve, warn_loopback_store};
use super::spelling::{Host, Meeting};
use crate::{signals, Error};

/// The store at `addr:port`, hosted by this agent or by another one.
pub(crate) struct Hosted {
    meeting: Meeting,
    /// The server while this agent hosts the store (kept alive until the agent ends).
    server: Option<StoreServer>,
    /// The port the store listens on (the one asked for, or the free one it took).
    port: u16,
}

impl Hosted {
    pub(crate) fn new(meeting: Meeting) -> Self {
        let port = meeting.port;
        Hosted {
            meeting,
            server: None,
            port,
        }
    }

    /// Whether node ranks are taken on arrival (`c10d` with several nodes).
    pub(crate) fn ranks_on_arrival(&self) -> bool {
        self.meeting.ranks_on_arrival
    }

    /// Whether this agent hosts the store (once [`Hosted::open`] ran).
    pub(crate) fn here(&self) -> bool {
        self.server.is_some()
    }

    /// The store's address and port: what the workers get as `MASTER_ADDR`/`MASTER_PORT`.
    pub(crate) fn master(&self) -> (String, u16) {
        (self.meeting.addr.clone(), self.port)
    }

    /// Hosts the store where the flags say this node does (unless, for c10d on a shared
    /// machine, another agent bound it first), else connects to it; this node keeps the
    /// rank it was given.
    pub(crate) fn open(&mut self, a: &Arrival<'_>) -> Result<Met, Error> {
        let (name, requested) = (self.meeting.addr.clone(), self.meeting.port);
        if matches!(self.meeting.host, Host::Here | Host::HereIfFree) {
            let addr = resolve(&name, requested, a.timeout, &signals::pending)?;
            warn_loopback_store(&name, addr, a.nnodes_max);
            // Note [Two protocols on one port] (phalanx-store): PyTorch workers reach this
            // store too; from other hosts only when asked, since their protocol cannot
            // authenticate.
            let torch = match a.torch_store {
                true => TorchClients::Anyone,
                false => TorchClients::Loopback,
            };
            let config = ServerConfig::default().with_torch_clients(torch);
            match StoreServer::bind_with(addr, a.auth.clone(), config) {
                Ok(server) => {
                    let addr = server.local_addr();
                    if a.torch_store && !addr.ip().is_loopback() {
                        eprintln!(
                            "phalanx launch: --torch-store: the store at {addr} serves \
                             PyTorch's TCPStore protocol, which has no authentication, to every \
                             host that reaches the port: they can read and write the PyTorch \
                             workers' keys"
                        );
                    }
                    self.port = addr.port();
                    let store: Arc<dyn Store> = Arc::new(server.local_store());
                    self.server = Some(server);
                    return Ok(met(a, store.clone(), store));
                }
                // Another agent on this machine bound the endpoint first: it hosts, this one
                // joins (torchrun's c10d backend falls back to a client the same way).
                Err(phalanx_store::Error::Bind { source, .. })
                    if self.meeting.host == Host::HereIfFree
                        && source.kind() == std::io::ErrorKind::AddrInUse => {}
                Err(e) => {
                    return Err(Error::Bind {
                        addr: addr.to_string(),
                        reason: e.to_string(),
                    })
                }
            }
        }
        let addr = format!("{name}:{requested}");
        let connect = |timeout: Duration| {
            TcpStore::connect(&addr, a.auth, timeout).map_err(|e| Error::Unreachable {
                addr: addr.clone(),
                waited_s: timeout.as_secs_f64(),
                reason: e.to_string(),
            })
        };
        let store = connect(a.timeout)?;
        let ctl = connect(a.control_timeout)?;
        Ok(met(a, Arc::new(store), Arc::new(ctl)))
    }
}

/// A hosted store's meeting: the rank given, no links (the store's host is in every round)
/// and no etcd.
fn met(a: &Arrival<'_>, store: Arc<dyn Store>, ctl: Arc<dyn Store>) -> Met {
    Met {
        node_rank: a.node_rank,
        store,
        ctl,
        links_at: None,
        etcd: None,
        beat: None,
        watch: None,
    }
}
