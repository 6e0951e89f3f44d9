//! The error type of `phalanx-store`: every variant names the key, address or peer involved.

use std::io;
use std::time::Duration;

/// Errors raised by the store client, server and in-memory store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // === Waiting ===
    /// A blocking `get`/`wait`/`multi_get` gave up: `key` was still missing after `after`.
    #[error("timed out after {after:?} waiting for store key {key:?}")]
    Timeout {
        /// The (first) key that was still missing.
        key: String,
        /// How long the call waited.
        after: Duration,
    },

    /// A blocking call of a [`crate::WatchedStore`] stopped waiting for `key` before its
    /// timeout: the watch said the wait was moot (`reason`).
    #[error("stopped waiting for store key {key:?}: {reason}")]
    Abandoned {
        /// The (first) key that was still missing.
        key: String,
        /// What the watch said.
        reason: String,
    },

    // === Connection set-up ===
    /// The store at `addr` could not be reached (retried with backoff until the timeout).
    #[error("cannot connect to the rendezvous store at {addr}: {source}")]
    Connect {
        /// The address tried, as given (`host:port`).
        addr: String,
        /// The last error seen.
        #[source]
        source: io::Error,
    },
    /// The handshake with `addr` failed: wrong token, wrong job id, or a rogue server.
    #[error("authentication with the store at {addr} failed: {reason}")]
    Auth {
        /// The peer's address.
        addr: String,
        /// What went wrong, never the token itself.
        reason: String,
    },
    /// The server could not listen on `addr`.
    #[error("cannot listen on {addr}: {source}{}", owner.as_deref().map(|o| format!(" (port {} is held by {o})", addr.port())).unwrap_or_default())]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// The operating system's error.
        #[source]
        source: io::Error,
        /// The process holding the port, when it could be found (Linux `/proc`).
        owner: Option<String>,
    },

    // === Talking ===
    /// The peer at `addr` sent bytes that break the protocol.
    #[error("protocol error from {addr}: {reason}")]
    Protocol {
        /// The peer's address.
        addr: String,
        /// What was wrong with its bytes.
        reason: String,
    },
    /// Reading from or writing to the store at `addr` failed during `op`.
    #[error("I/O error with the store at {addr} during {op}: {source}")]
    Io {
        /// The peer's address.
        addr: String,
        /// The store operation (`set`, `get`, `handshake`, …).
        op: &'static str,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    // === Values ===
    /// The operation cannot apply to the value held by `key` (e.g. `add` on a non-integer).
    #[error("store key {key:?}: {reason}")]
    Value {
        /// The key involved.
        key: String,
        /// Why the operation was refused.
        reason: String,
    },
    /// The etcd cluster at `endpoints` failed `op` (no member answered, no leader, a refused
    /// password or certificate, …).
    #[error("etcd at {endpoints}: {op} failed: {reason}")]
    Etcd {
        /// The endpoints tried, as given.
        endpoints: String,
        /// The store operation (`connect`, `get`, `add`, …).
        op: &'static str,
        /// etcd's or the client's error.
        reason: String,
    },
    /// An argument breaks a protocol limit or the API contract (too long a key, mismatched lists).
    #[error("invalid store request: {reason}")]
    Invalid {
        /// What was wrong.
        reason: String,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
