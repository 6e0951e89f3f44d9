//! The error type of `phalanx-ddp`.

/// Errors of DDP construction, gradient synchronisation and the tensor adapter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // === Model agreement ===
    /// A rank's model differs from rank 0's: a different parameter name, shape or count.
    #[error(
        "model mismatch: rank {rank} has {theirs} where rank 0 has {ours} (parameter #{index}); \
         every rank must build the same model"
    )]
    ModelMismatch {
        /// The first rank found to differ from rank 0.
        rank: usize,
        /// Position of the first differing parameter in canonical order.
        index: usize,
        /// Rank 0's parameter at that position, as `name [shape]` or `nothing`.
        ours: String,
        /// The other rank's parameter at that position.
        theirs: String,
    },

    /// The options cannot work together (`reason` says which and why).
    #[error("DDP options: {reason}")]
    Options {
        /// What conflicts.
        reason: String,
    },

    /// The module's parameter list changed after construction (`map_module` must keep it).
    #[error("rank {rank}: the model's parameters changed since DDP was constructed")]
    ModelChanged {
        /// This rank.
        rank: usize,
    },

    // === Communication ===
    /// A construction-time collective (model check, parameter broadcast) failed.
    #[error("DDP setup: {op} failed: {source}")]
    Setup {
        /// The collective and its purpose.
        op: &'static str,
        /// The process group's error (names the rank and root cause).
        source: phalanx_pg::Error,
    },
    /// Averaging a bucket of gradients failed.
    #[error("gradient bucket {bucket}: {op} failed: {source}")]
    Collective {
        /// The hook's collective.
        op: &'static str,
        /// The bucket's index in launch order.
        bucket: usize,
        /// The process group's error (names the rank and root cause).
        source: phalanx_pg::Error,
    },

    /// A step-time collective other than a gradient bucket (the step header, the buffers)
    /// failed.
    #[error("DDP step: {op} failed: {source}")]
    Sync {
        /// The collective and its purpose.
        op: &'static str,
        /// The process group's error (names the rank and root cause).
        source: phalanx_pg::Error,
    },
    /// `join` was called with `no_sync` gradients still waiting.
    #[error(
        "rank {rank}: join() with gradients accumulated by no_sync still waiting: finish the \
         accumulation with sync_gradients or sync_and_step before joining"
    )]
    JoinWithAccumulated {
        /// This rank.
        rank: usize,
    },

    // === Outer sync (DiLoCo) ===
    /// The outer sync's options cannot work in this group (`reason` names the flag and why).
    #[error("outer sync: {reason}")]
    Outer {
        /// What is wrong, with what to use instead.
        reason: String,
    },
    /// A collective of the outer sync failed.
    #[error("outer sync: {op} failed: {source}")]
    OuterSync {
        /// The collective and its purpose.
        op: &'static str,
        /// The process group's error (names the rank and root cause).
        source: phalanx_pg::Error,
    },
    /// The engine cannot have its parameters replaced between steps (`reason` says why).
    #[error("{engine}: {reason}")]
    Unsupported {
        /// The engine and its mode.
        engine: String,
        /// What is not built, and what to use instead.
        reason: String,
    },

    // === Adapter ===
    /// A list of parameter values has the wrong number of entries.
    #[error("expected values for {expected} parameters, got {got}")]
    ParamCount {
        /// Parameters in the model.
        expected: usize,
        /// Values given.
        got: usize,
    },
    /// A parameter value or gradient has the wrong number of elements.
    #[error("parameter `{name}` has {expected} elements, got {got}")]
    ParamSize {
        /// The parameter's module path.
        name: String,
        /// Elements of the parameter.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// The tensor library failed to read a parameter or gradient.
    #[error("reading parameter `{name}` failed: {reason}")]
    Tensor {
        /// The parameter's module path.
        name: String,
        /// The library's message.
        reason: String,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
