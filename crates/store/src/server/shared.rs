//! [`Shared`]: the state every part of a store server holds (the two key tables, the token,
//! the tunables, the stop flag, the live connections and the traffic counters).

use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::config::ServerConfig;
use crate::table::Table;
use crate::Auth;

/// Stack reserved for each PyTorch client's thread: a few pages of it are ever touched.
const THREAD_STACK: usize = 256 * 1024;

#[derive(Default)]
pub(super) struct Conns {
    /// Connections open now, on the event loop or on a thread of their own.
    pub(super) open: usize,
    next_id: u64,
    /// The sockets of the clients served on threads (PyTorch's), so that shutdown can unblock
    /// them.
    pub(super) streams: HashMap<u64, Arc<TcpStream>>,
    pub(super) threads: Vec<JoinHandle<()>>,
}

pub(crate) struct Shared {
    pub(crate) table: Arc<Table>,
    /// The keys of PyTorch's clients, apart from phalanx's (see `torch.rs`).
    pub(crate) torch_table: Arc<Table>,
    pub(crate) auth: Auth,
    pub(crate) config: ServerConfig,
    pub(crate) stopping: AtomicBool,
    pub(super) conns: Mutex<Conns>,
    pub(crate) traffic: Traffic,
}

/// Request counters, kept so that tests and `phalanx bench rendezvous` can show that a
/// rendezvous costs O(world_size) store traffic, not O(world_size²).
#[derive(Default)]
pub(crate) struct Traffic {
    pub(crate) requests: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
}

/// A connection's place under the cap (`max_connections`), given back when dropped.
pub(super) struct Admitted(Arc<Shared>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.conns().open -= 1;
    }
}

impl Shared {
    pub(super) fn conns(&self) -> MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for one more connection, `None` when `max_connections` are open.
    pub(super) fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let mut conns = self.conns();
        if conns.open >= self.config.max_connections {
            return None;
        }
        conns.open += 1;
        Some(Admitted(self.clone()))
    }

    /// Serves `stream` on a thread of its own with `serve`; shutdown unblocks and joins it.
    pub(super) fn spawn_thread(
        self: &Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        serve: impl FnOnce(&Shared, &TcpStream) + Send + 'static,
    ) {
        let (id, stream) = {
            let mut conns = self.conns();
            // A task still running after the event loop's shutdown gave up on it (a bug) must
            // not start a thread that shutdown no longer joins.
            if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            // Reap finished threads so the list stays as long as the live connections.
            let (done, live): (Vec<_>, Vec<_>) = std::mem::take(&mut conns.threads)
                .into_iter()
                .partition(|t| t.is_finished());
            conns.threads = live;
            for t in done {
                let _ = t.join();
            }
            let id = conns.next_id;
            conns.next_id += 1;
            let stream = Arc::new(stream);
            conns.streams.insert(id, stream.clone());
            (id, stream)
        };
        let shared = self.clone();
        // Not under the lock: a thread that fails to start drops `serve`, and with it the
        // connection's `Admitted`, which takes the lock.
        let spawned = std::thread::Builder::new()
            .name("phalanx-store-conn".into())
            .stack_size(THREAD_STACK)
            .spawn(move || {
                serve(&shared, &stream);
                shared.conns().streams.remove(&id);
            });
        let mut conns = self.conns();
        match spawned {
            Ok(t) => conns.threads.push(t),
            Err(e) => {
                conns.streams.remove(&id);
                tracing::warn!(peer = %peer, error = %e, "store: cannot start a connection thread; dropped");
            }
        }
    }
}
