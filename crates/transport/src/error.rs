//! The error type of `phalanx-transport`. Every variant names the peer rank involved.

use std::{io, time::Duration};

use crate::{frame::FrameError, handshake::HandshakeError, Fingerprint};

/// Errors of byte transports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // === Peer failures ===
    /// The peer closed its connection (it exited, crashed or aborted).
    #[error("rank {peer} closed the connection during {during}")]
    PeerClosed {
        /// The peer.
        peer: usize,
        /// The collective in progress.
        during: String,
    },
    /// A peer on this host whose process is gone (shared memory watches its pid): it exited,
    /// crashed or was killed without a word on the wire.
    #[error("rank {peer} (process {pid}) exited during {during}")]
    PeerExited {
        /// The peer.
        peer: usize,
        /// Its process id.
        pid: u32,
        /// The collective in progress.
        during: String,
    },
    /// The peer aborted the job and said why.
    #[error("rank {peer} aborted: {reason}")]
    PeerAborted {
        /// The peer.
        peer: usize,
        /// Its reason (the root cause travels along cascades unchanged).
        reason: String,
    },
    /// The peer is in a different collective, or the same one with other arguments.
    #[error("collective mismatch: rank {me} called {ours} but rank {peer} called {theirs}")]
    Mismatch {
        /// This rank.
        me: usize,
        /// The peer.
        peer: usize,
        /// What this rank called.
        ours: Fingerprint,
        /// What the peer called.
        theirs: Fingerprint,
    },
    /// A frame length that disagrees with the collective's layout.
    #[error("rank {peer} sent {got} bytes in {fp}, rank {me} expected {expected}")]
    Length {
        /// This rank.
        me: usize,
        /// The peer.
        peer: usize,
        /// The collective.
        fp: Fingerprint,
        /// Bytes expected.
        expected: usize,
        /// Bytes announced.
        got: usize,
    },
    /// The peer sent bytes that are not a valid frame.
    #[error("malformed frame from rank {peer}: {source}")]
    Frame {
        /// The peer.
        peer: usize,
        /// What was wrong.
        source: FrameError,
    },
    /// No progress for the configured timeout.
    #[error("collective timeout after {after:?} without progress in {during}, waiting for rank(s) {waiting_for:?}")]
    Timeout {
        /// The collective in progress.
        during: String,
        /// The ranks that did not deliver.
        waiting_for: Vec<usize>,
        /// The timeout.
        after: Duration,
    },
    /// This transport was aborted locally (by this rank or a watcher).
    #[error("aborted: {reason}")]
    Aborted {
        /// Why.
        reason: String,
    },
    /// An operating-system error on the connection to `peer`.
    #[error("{op} with rank {peer}: {source}")]
    Io {
        /// The peer.
        peer: usize,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },

    // === Setup ===
    /// A connection attempt failed its handshake.
    #[error("handshake with {addr} failed: {source}")]
    Handshake {
        /// The remote address.
        addr: String,
        /// What was wrong.
        source: HandshakeError,
    },
    /// Two connections claimed the same rank.
    #[error(
        "two processes claim rank {rank} (from {first} and {second}); check RANK on every host"
    )]
    DuplicateRank {
        /// The rank claimed twice.
        rank: usize,
        /// Address of the first.
        first: String,
        /// Address of the second.
        second: String,
    },
    /// Could not reach a peer's listen address.
    #[error("cannot connect to rank {peer} at {addr}: {source}")]
    Connect {
        /// The peer.
        peer: usize,
        /// Its address.
        addr: String,
        /// The last OS error.
        source: io::Error,
    },
    /// The mesh did not complete in time.
    #[error("mesh setup timed out after {after:?}: no connection from rank(s) {missing:?}")]
    MeshTimeout {
        /// Ranks that never connected.
        missing: Vec<usize>,
        /// The timeout.
        after: Duration,
    },
    /// Mesh setup stopped waiting for peers its watch said will not come (a rank the launcher
    /// logged gone while a fault-tolerant group formed: Note [A watched mesh]).
    #[error("mesh setup stopped waiting for rank(s) {missing:?} after {after:?}: {reason}")]
    MeshAbandoned {
        /// The ranks (of this group, not the launcher's slots, which the reason may name) that
        /// the side that stopped still waited for: higher ranks not yet accepted, or lower ranks
        /// not yet connected to.
        missing: Vec<usize>,
        /// How long setup had waited.
        after: Duration,
        /// What the watch said.
        reason: String,
    },
    /// The interface variable that decided (`PHALANX_SOCKET_IFNAME`, `GLOO_SOCKET_IFNAME` or
    /// `NCCL_SOCKET_IFNAME`, Note [Borrowed variables] in phalanx-core) matched no interface.
    #[error(
        "{var}={spec:?} matches no interface with an address ({}); available: {available}",
        phalanx_core::env::SocketIfname::syntax_of(var)
    )]
    NoInterface {
        /// The variable that held the spec (its syntax follows from it).
        var: &'static str,
        /// The spec, as the user wrote it.
        spec: String,
        /// Interfaces present.
        available: String,
    },
    /// A shared-memory segment could not be created, opened or used.
    #[error("shared memory {path}: {op}: {source}")]
    Shm {
        /// The segment's file (under /dev/shm).
        path: String,
        /// What was being done.
        op: String,
        /// The OS error, or `InvalidData` for a segment with the wrong layout.
        source: io::Error,
    },
    /// Binding or listening failed.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
