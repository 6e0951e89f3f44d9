//! The crate's one error type.

/// What can go wrong when the Learner runs across processes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The process group could not be formed from the launcher's environment.
    #[error("phalanx-learner: joining the process group (RANK, WORLD_SIZE, MASTER_ADDR…): {0}")]
    ProcessGroup(#[source] phalanx_pg::Error),
    /// A collective of the strategy itself (the end-of-epoch agreement) failed.
    #[error("phalanx-learner: rank {rank}: {operation} failed: {source}")]
    Collective {
        /// This process's rank.
        rank: usize,
        /// What the strategy was doing.
        operation: &'static str,
        /// The process group's error (a peer that died is named there).
        #[source]
        source: phalanx_pg::Error,
    },
    /// DistributedDataParallel refused or failed (the model differs across ranks, a peer died).
    #[error("phalanx-learner: rank {rank}: {operation}: {source}")]
    Ddp {
        /// This process's rank.
        rank: usize,
        /// What the strategy was doing.
        operation: &'static str,
        /// DDP's error (boxed: it is large, and errors are rare).
        #[source]
        source: Box<phalanx_ddp::Error>,
    },
    /// The optimizer's state could not be read, cut or joined (`--sharding optimizer`).
    #[error("phalanx-learner: rank {rank}: the optimizer's state: {reason}")]
    OptimizerState {
        /// This process's rank.
        rank: usize,
        /// What went wrong.
        reason: String,
    },
    /// A sharding mode the Learner cannot have, and why ([`Distributed::with_sharding`]).
    ///
    /// [`Distributed::with_sharding`]: crate::Distributed::with_sharding
    #[error("phalanx-learner: sharding {sharding}: {why}")]
    Sharding {
        /// The mode asked for (`--sharding`'s word).
        sharding: &'static str,
        /// Why the Learner cannot have it, and what it can have.
        why: &'static str,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
