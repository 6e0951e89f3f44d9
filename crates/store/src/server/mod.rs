//! `StoreServer`: the TCP rendezvous server.
//!
//! // Note [One event loop for every connection]
//! Every phalanx client is a task on one event loop (a tokio runtime with a thread per core,
//! at most 4), not a thread of its own. A blocking `get`/`wait` is parked in the table under
//! the key it misses (`Table::wait_get_parked`), and the set that completes it wakes the task,
//! not a thread: no thread sleeps per connection, none is switched to per request, and the
//! replies to the 16,384 ranks waiting for a rendezvous's table go out from the loop's threads
//! in turn. With a thread per connection, 16,384 simulated ranks took 2.9–3.6 s to rendezvous
//! on 2 cores, against 1.8–2.2 s now in the same runs (docs/store.md). On one loop thread it
//! was 2.2–2.6 s: the replies' sends (each runs the receiver's side of loopback TCP) are most
//! of the loop's work, and two cores share them. More threads than cores would only take turns.
//! The loop watches a parked client's socket, so a client that hangs up mid-wait is seen at
//! once (it was polled every 500 ms). Unauthenticated connections cannot pile up: each gets
//! `handshake_timeout` to prove the token (slowloris), and `max_connections` caps the total.
//! PyTorch's clients, whose protocol blocks in `wait` and `barrier`, are one per worker at most
//! and keep a thread each (`torch.rs`).
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
mod shared;
mod torch;

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use config::{ServerConfig, TorchClients};
use shared::{Conns, Shared, Traffic};

use crate::table::Table;
use crate::{Auth, Error, HashStore, Result};

/// Most threads of the event loop; see Note [One event loop for every connection].
const MAX_LOOP_THREADS: usize = 4;
/// How long shutdown waits for the event loop's threads.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(10);

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

/// A running store server. Dropping it (or [`StoreServer::shutdown`]) stops the listener, ends
/// every connection and waits for its threads: no thread outlives it.
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
    /// The event loop; shutting it down drops every connection's task, which closes its
    /// socket and takes its parked wait off the table.
    event_loop: Option<tokio::runtime::Runtime>,
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
        let io_err = |op: &'static str| {
            move |source: std::io::Error| Error::Io {
                addr: local_addr.to_string(),
                op,
                source,
            }
        };
        listener.set_nonblocking(true).map_err(io_err("listen"))?;
        let loop_threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_LOOP_THREADS);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(loop_threads)
            .thread_name("phalanx-store-loop")
            .enable_io()
            .enable_time()
            .build()
            .map_err(io_err("start the event loop"))?;
        let listener = {
            let _in_runtime = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(io_err("listen"))?
        };
        let shared = Arc::new(Shared {
            table: Arc::new(Table::default()),
            torch_table: Arc::new(Table::default()),
            auth,
            config,
            stopping: AtomicBool::new(false),
            conns: Mutex::new(Conns::default()),
            traffic: Traffic::default(),
        });
        runtime.spawn(accept_loop(shared.clone(), listener));
        tracing::info!(addr = %local_addr, job_id = %shared.auth.job_id, "store listening");
        Ok(StoreServer {
            local_addr,
            shared,
            event_loop: Some(runtime),
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
        self.shared.conns().open
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
        let Some(event_loop) = self.event_loop.take() else {
            return;
        };
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Every task is dropped at its next await, and a task runs microseconds between two:
        // the timeout is never reached, it only bounds a bug.
        // From a thread of its own: tokio refuses to wait for a runtime's threads from inside
        // async code (it panics), and a server may be dropped there.
        let shut = std::thread::Builder::new()
            .name("phalanx-store-stop".into())
            .spawn(move || event_loop.shutdown_timeout(SHUTDOWN_LIMIT));
        match shut {
            Ok(t) => {
                let _ = t.join();
            }
            Err(e) => {
                tracing::warn!(error = %e, "store: cannot start the thread that stops the event loop")
            }
        }
        let threads = {
            let mut conns = self.shared.conns();
            for s in conns.streams.values() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            std::mem::take(&mut conns.threads)
        };
        // PyTorch clients waiting in `wait`/`barrier` see `stopping` on wake-up.
        self.shared.torch_table.wake_all();
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

async fn accept_loop(shared: Arc<Shared>, listener: tokio::net::TcpListener) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning on the error.
                tracing::warn!(error = %e, "store: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Some(admitted) = shared.admit() else {
            tracing::warn!(peer = %peer, limit = shared.config.max_connections, "store: too many connections; dropped");
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move { connection::serve(&shared, stream, peer, admitted).await });
    }
}
