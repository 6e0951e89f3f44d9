//! [`Shared`]: the state every thread of a store server holds (the two key tables, the token,
//! the tunables, the stop flag, the live connections and the traffic counters).

use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::config::ServerConfig;
use crate::table::Table;
use crate::Auth;

#[derive(Default)]
pub(super) struct Conns {
    pub(super) next_id: u64,
    /// Clones of the live sockets, so shutdown can unblock their threads.
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

impl Shared {
    pub(super) fn conns(&self) -> MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }
}
