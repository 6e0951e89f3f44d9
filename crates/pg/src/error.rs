//! The error type of `phalanx-pg`.

/// Errors of process-group setup and collectives.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A launcher or scheduler variable is missing or malformed.
    #[error("environment variable {name}={value:?}: {reason}")]
    Env {
        /// Variable name.
        name: String,
        /// Its value (empty when missing).
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// Shared configuration (timeouts, dtypes) was invalid.
    #[error(transparent)]
    Config(#[from] phalanx_core::Error),
    /// The rendezvous store failed.
    #[error("rank {rank}: rendezvous store: {source}")]
    Store {
        /// This rank.
        rank: usize,
        /// The store error.
        source: phalanx_store::Error,
    },
    /// Some ranks never joined the rank-level rendezvous.
    #[error("rank {rank}: ranks {missing:?} did not publish their address within {waited_s:.1} s (not started, crashed, or a different MASTER_ADDR/PORT)")]
    RendezvousIncomplete {
        /// This rank.
        rank: usize,
        /// The ranks missing.
        missing: Vec<usize>,
        /// How long this rank waited.
        waited_s: f64,
    },
    /// Mesh setup failed.
    #[error("rank {rank}: setting up the transport: {source}")]
    Setup {
        /// This rank.
        rank: usize,
        /// The transport error.
        source: phalanx_transport::Error,
    },
    /// A backend is not in this build, or could not start (`backend` names it).
    #[error("backend {backend}: {reason}")]
    Backend {
        /// `native` or `mpi`.
        backend: &'static str,
        /// What is missing or went wrong.
        reason: String,
    },
    /// A collective failed; `cause` names the root cause (which rank, what it said).
    #[error("rank {rank}: {op} failed: {cause}")]
    Collective {
        /// This rank.
        rank: usize,
        /// The collective (`allreduce #12 sum f32 count=1024`).
        op: String,
        /// Root cause.
        cause: String,
    },
    /// An earlier failure (here or on another rank) broke the group.
    #[error("rank {rank}: the process group has failed: {cause}")]
    Failed {
        /// This rank.
        rank: usize,
        /// Root cause of the first failure.
        cause: String,
    },
    /// Fault tolerance: this rank's group failed and no replacement generation began within
    /// `PHALANX_TIMEOUT` (Note [Generations]).
    #[error("rank {rank}: the process group failed and no replacement joined within {waited_s:.1} s (generation {generation}; a whole node lost, or no restart left): {cause}")]
    Regroup {
        /// This rank.
        rank: usize,
        /// The generation it was in.
        generation: u64,
        /// How long it waited for a new one.
        waited_s: f64,
        /// The failure that broke the group.
        cause: String,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
