//! The rendezvous key-value store of phalanx: PyTorch TCPStore's operations (`set`, blocking
//! `get`, `add`, `compare_set`, `wait`, `check`, `delete_key`, `num_keys`, `append`,
//! `multi_get`, `multi_set`) over an authenticated TCP protocol, plus an in-memory
//! [`HashStore`] for thread-level tests and a [`PrefixStore`] view for restart rounds and
//! subgroups.
//!
//! ```
//! use std::time::Duration;
//! use phalanx_store::{Auth, PrefixStore, Store, StoreServer, TcpStore};
//!
//! let auth = Auth::random("my-job"); // a launcher passes this on as PHALANX_JOB_ID/PHALANX_TOKEN
//! let server = StoreServer::bind("127.0.0.1:0".parse().unwrap(), auth.clone()).unwrap();
//! let addr = server.local_addr().to_string();
//!
//! let rank0 = TcpStore::connect(&addr, &auth, Duration::from_secs(10)).unwrap();
//! let rank1 = TcpStore::connect(&addr, &auth, Duration::from_secs(10)).unwrap();
//! let waiter = std::thread::spawn(move || rank1.get("rank0/addr").unwrap());
//! rank0.set("rank0/addr", b"10.0.0.1:4000").unwrap();
//! assert_eq!(waiter.join().unwrap(), b"10.0.0.1:4000");
//!
//! let round = PrefixStore::new("round2", rank0);
//! assert_eq!(round.add("arrived", 1).unwrap(), 1);
//!
//! let intruder = Auth::new("my-job", b"guessed".to_vec());
//! assert!(TcpStore::connect(&addr, &intruder, Duration::from_secs(1)).is_err());
//! ```
//!
//! Every connection opens with a mutual HMAC-SHA256 challenge over the job token; every length
//! is bounded before allocation; bad input closes that connection only. The protocol is in
//! `docs/store.md` and in the sans-IO [`wire`] module.
//!
//! The server also serves PyTorch's TCPStore clients on the same port (from this host only,
//! unless [`TorchClients::Anyone`]), in a table of their own, and [`TorchStore`] is a client of
//! PyTorch's store (torchrun's): see [`wire::torch`].
#![warn(missing_docs, unreachable_pub)]

mod auth;
mod error;
mod etcd;
mod hash_store;
mod io_util;
pub mod keys;
mod port_owner;
mod prefix_store;
mod server;
mod store;
mod table;
mod tcp_store;
mod torch_store;
mod watched_store;
pub mod wire;

pub use auth::{Auth, DEFAULT_JOB_ID};
pub use error::{Error, Result};
pub use etcd::EtcdOptions;
#[cfg(feature = "etcd")]
pub use etcd::{EtcdLease, EtcdStore};
pub use hash_store::HashStore;
pub use prefix_store::PrefixStore;
pub use server::{ServerConfig, StoreServer, StoreStats, TorchClients};
pub use store::{Claim, Store};
pub use tcp_store::TcpStore;
pub use torch_store::TorchStore;
pub use watched_store::{Watch, WatchedStore};
