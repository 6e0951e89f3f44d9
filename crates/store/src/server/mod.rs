//! `StoreServer`: the TCP rendezvous server.
//!
//! // Note [Thread per connection]
//! One OS thread per client, with a small stack (256 KiB of address space, of which a few pages
//! are ever touched), rather than a poll loop: blocking `get`/`wait` then map onto a condvar
//! sleep in that thread with no state machine, and the numbers are modest — a job has one
//! client per rank plus the agents, and 1,024 clients cost 256 MiB of *virtual* memory and a
//! few MiB resident. Unauthenticated connections cannot pile up: each gets `handshake_timeout`
//! to prove the token (slowloris), and `max_connections` caps the total.
//!
//! // Note [Two protocols on one port]
//! The store also speaks PyTorch's TCPStore protocol (`wire::torch`), so that a PyTorch script
//! under `phalanx launch` finds its `MASTER_ADDR:MASTER_PORT` store (torchrun's agent store,
//! `TORCHELASTIC_USE_AGENT_STORE=True`) where phalanx's workers find theirs. The first byte
//! tells the two apart without reading it: PyTorch's clients open with `VALIDATE` (0), ours
//! with `PHXS`. PyTorch's protocol cannot authenticate, so its clients get a table of their
//! own (they can never forge phalanx's control keys), and are served only from loopback unless
//! the launcher was told otherwise (`TorchClients`); a refused one is logged with the flag
//! that allows it. Both paths share the connection cap and the handshake deadline.

mod config;
mod connection;
mod futex_room;
mod shared;
mod torch;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub use config::{ServerConfig, TorchClients};
use shared::{Conns, Shared, Traffic};

use crate::table::Table;
use crate::{Auth, Error, HashStore, Result};

/// Stack reserved for each connection thread; see Note [Thread per connection].
const CONN_STACK: usize = 256 * 1024;

/// What a [`StoreServer`] has served since it started (authenticated requests only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Requests answered.
    pub requests: u64,
    /// Request frame bytes received.
    pub bytes_in: u64,
    /// Reply bytes sent.
    pub bytes_out: u64,
}

/// A running store server. Dropping it (or [`StoreServer::shutdown`]) stops the listener and
/// every connection thread and waits for them: no thread outlives it.
///
/// ```
/// use phalanx_store::{Auth, StoreServer, Store};
/// let server = StoreServer::bind("127.0.0.1:0".parse().unwrap(), Auth::random("doc")).unwrap();
/// assert_ne!(server.local_addr().port(), 0);
/// server.local_store().set("k", b"v").unwrap(); // in-process handle, no socket
/// server.shutdown();
/// ```
pub struct StoreServer {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for StoreServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreServer")
            .field("local_addr", &self.local_addr)
            .field("auth", &self.shared.auth)
            .finish()
    }
}

impl StoreServer {
    /// Listens on `addr` (port 0 picks a free one) and serves clients that prove `auth`.
    pub fn bind(addr: SocketAddr, auth: Auth) -> Result<StoreServer> {
        Self::bind_with(addr, auth, ServerConfig::default())
    }

    /// [`StoreServer::bind`] with explicit tunables.
    pub fn bind_with(addr: SocketAddr, auth: Auth, config: ServerConfig) -> Result<StoreServer> {
        use socket2::{Domain, Protocol, Socket, Type};
        let bind_err = |source: std::io::Error| {
            let owner = if source.kind() == std::io::ErrorKind::AddrInUse {
                crate::port_owner::find(addr.port())
            } else {
                None
            };
            Error::Bind {
                addr,
                source,
                owner,
            }
        };
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(bind_err)?;
        // Restarting a store on its port must not wait out TIME_WAIT (TCPStore does the same).
        socket.set_reuse_address(true).map_err(bind_err)?;
        socket.bind(&addr.into()).map_err(bind_err)?;
        // A deep backlog: 1,024 ranks connecting at once must not hit SYN retransmits.
        socket.listen(4096).map_err(bind_err)?;
        Self::from_listener_with(socket.into(), auth, config)
    }

    /// Serves on an already-bound listener (e.g. one inherited from a launcher).
    pub fn from_listener(listener: TcpListener, auth: Auth) -> Result<StoreServer> {
        Self::from_listener_with(listener, auth, ServerConfig::default())
    }

    /// [`StoreServer::from_listener`] with explicit tunables.
    pub fn from_listener_with(
        listener: TcpListener,
        auth: Auth,
        config: ServerConfig,
    ) -> Result<StoreServer> {
        let local_addr = listener.local_addr().map_err(|source| Error::Io {
            addr: "listener".into(),
            op: "local_addr",
            source,
        })?;
        listener
            .set_nonblocking(false)
            .map_err(|source| Error::Io {
                addr: local_addr.to_string(),
                op: "listen",
                source,
            })?;
        let shared = Arc::new(Shared {
            table: Arc::new(Table::default()),
            torch_table: Arc::new(Table::default()),
            auth,
            config,
            stopping: AtomicBool::new(false),
            conns: Mutex::new(Conns::default()),
            traffic: Traffic::default(),
        });
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("phalanx-store-accept".into())
            .spawn(move || accept_loop(&s, listener))
            .map_err(|source| Error::Io {
                addr: local_addr.to_string(),
                op: "spawn",
                source,
            })?;
        tracing::info!(addr = %local_addr, job_id = %shared.auth.job_id, "store listening");
        Ok(StoreServer {
            local_addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The address the server listens on (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// An in-process handle on the same keys, without a socket (for the process hosting it).
    pub fn local_store(&self) -> HashStore {
        HashStore::from_table(self.shared.table.clone())
    }

    /// An in-process handle on the keys of PyTorch's clients (`torch.distributed.TCPStore`).
    pub fn torch_store(&self) -> HashStore {
        HashStore::from_table(self.shared.torch_table.clone())
    }

    /// Connections currently open (authenticated or still in the handshake).
    pub fn num_connections(&self) -> usize {
        self.shared.conns().streams.len()
    }

    /// Requests and bytes served so far.
    pub fn stats(&self) -> StoreStats {
        let t = &self.shared.traffic;
        StoreStats {
            requests: t.requests.load(Ordering::Relaxed),
            bytes_in: t.bytes_in.load(Ordering::Relaxed),
            bytes_out: t.bytes_out.load(Ordering::Relaxed),
        }
    }

    /// Stops serving and waits for every thread to exit.
    pub fn shutdown(self) {
        drop(self);
    }

    fn stop(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept() with a connection of our own; it sees `stopping` and exits.
        let mut wake = self.local_addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        let _ = accept.join();
        let threads = {
            let mut conns = self.shared.conns();
            for s in conns.streams.values() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            std::mem::take(&mut conns.threads)
        };
        // Waiters in get/wait see `stopping` on wake-up.
        self.shared.table.wake_all();
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: TcpListener) {
    for conn in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let (stream, peer) = match conn.and_then(|s| Ok((s.peer_addr()?, s))) {
            Ok((peer, s)) => (s, peer),
            Err(e) => {
                // EMFILE and friends: back off instead of spinning on the error.
                tracing::warn!(error = %e, "store: accept failed");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let mut conns = shared.conns();
        // Reap finished threads so the list stays as long as the live connections.
        let (done, live): (Vec<_>, Vec<_>) = std::mem::take(&mut conns.threads)
            .into_iter()
            .partition(|t| t.is_finished());
        conns.threads = live;
        for t in done {
            let _ = t.join();
        }
        if conns.streams.len() >= shared.config.max_connections {
            tracing::warn!(peer = %peer, limit = shared.config.max_connections, "store: too many connections; dropped");
            continue;
        }
        let id = conns.next_id;
        conns.next_id += 1;
        // Shared, not cloned: a clone is a second descriptor per connection, and 16,384
        // connections had to fit one process's limit (20,000 here).
        let stream = Arc::new(stream);
        conns.streams.insert(id, stream.clone());
        futex_room::make_room(conns.streams.len());
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("phalanx-store-conn".into())
            .stack_size(CONN_STACK)
            .spawn(move || {
                connection::serve(&s, &stream, peer);
                s.conns().streams.remove(&id);
            });
        match spawned {
            Ok(t) => conns.threads.push(t),
            Err(e) => {
                conns.streams.remove(&id);
                tracing::warn!(peer = %peer, error = %e, "store: cannot start a connection thread; dropped");
            }
        }
    }
}
