//! Byte transports between the ranks of a group: framed, fingerprinted, authenticated.
//!
//! Collective algorithms (`phalanx-collectives`) see only the [`Transport`] trait. The TCP
//! implementation keeps a full mesh of connections and drives each step's sends and receives
//! concurrently on non-blocking sockets. Framing ([`frame`]) and the handshake ([`handshake`])
//! are pure functions over bytes.
//!
//! ```
//! use std::{net::SocketAddr, time::Duration};
//! use phalanx_core::{DType, ReduceOp};
//! use phalanx_transport::{tcp, CollectiveKind, Fingerprint, MeshConfig, TcpTransport, Transport};
//!
//! let listeners: Vec<_> = (0..2).map(|_| tcp::listen([127, 0, 0, 1].into()).unwrap()).collect();
//! let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
//! let fp = Fingerprint { seq: 0, kind: CollectiveKind::SendRecv, op: None, dtype: DType::U8, count: 5, root: 0 };
//! std::thread::scope(|s| {
//!     for (rank, listener) in listeners.into_iter().enumerate() {
//!         let addrs = addrs.clone();
//!         s.spawn(move || {
//!             let cfg = MeshConfig { rank, world_size: 2, job_id: "doc".into(),
//!                                    token: b"secret".to_vec(), timeout: Duration::from_secs(10) };
//!             let mut t = TcpTransport::connect(&cfg, listener, &addrs).unwrap();
//!             let mut got = [0u8; 5];
//!             t.send_recv(&fp, 1 - rank, b"hello", 1 - rank, &mut got).unwrap();
//!             assert_eq!(&got, b"hello");
//!         });
//!     }
//! });
//! ```
#![warn(missing_docs, unreachable_pub)]

mod error;
mod fingerprint;
pub mod frame;
pub mod handshake;
pub mod ifname;
#[cfg(target_os = "linux")]
pub mod shm;
pub mod tcp;
mod tcp_exchange;
mod transport;

pub use error::{Error, Result};
pub use fingerprint::{CollectiveKind, Fingerprint};
pub use tcp::{AbortHandle, MeshConfig, SetupWatch, TcpTransport};
pub use transport::{RecvReq, SendReq, Transport};
