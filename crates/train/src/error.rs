//! The error type of `phalanx-train`.

/// Errors of the training step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Gradient synchronisation or a parameter read failed.
    #[error(transparent)]
    Ddp(#[from] phalanx_ddp::Error),
    /// A batch whose features do not match its labels and the model's input width.
    #[error("batch of {labels} labels needs {labels}×{input} features, got {features}")]
    BatchShape {
        /// Features given.
        features: usize,
        /// Labels given.
        labels: usize,
        /// The model's input width.
        input: usize,
    },
    /// A checkpoint could not be written, or is damaged, malformed, or does not fit the model
    /// (phalanx-checkpoint's error; its collective and parameter failures come as
    /// [`Error::Pg`] and [`Error::Ddp`], so that fault tolerance sees a broken group).
    #[error(transparent)]
    Checkpoint(phalanx_checkpoint::Error),
    /// Metrics or plots could not be written.
    #[error("writing {}: {reason}", path.display())]
    Output {
        /// The file involved.
        path: std::path::PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A dataset could not be loaded or sampled.
    #[error("data: {0}")]
    Data(#[from] phalanx_data::Error),
    /// A collective of the training loop failed (the error names the rank and the cause).
    #[error(transparent)]
    Pg(#[from] phalanx_pg::Error),
    /// A tensor-parallel operation failed (its process group's error, or a split that does
    /// not fit).
    #[error("tensor parallelism: {0}")]
    TensorParallel(#[from] phalanx_tensor_parallel::Error),
    /// The run's configuration is invalid or does not match its checkpoint.
    #[error("{0}")]
    Config(String),
    /// The training device is not in this build or not on this machine (`--device`).
    #[error("device {spec}: {reason}")]
    Device {
        /// The device asked for (`cuda:1`).
        spec: String,
        /// What is missing: the `cuda` feature, the driver, or the GPU.
        reason: String,
    },
    /// The run stopped at a step boundary because a rank received `signal` (Note [Stop
    /// agreement]); `checkpoint` is the one committed at that step, if the run has a directory.
    #[error("stopped by signal {signal} after step {global_step}{}", match checkpoint {
        Some(p) => format!("; checkpoint {} committed", p.display()),
        None => String::new(),
    })]
    Stopped {
        /// The signal number (SIGUSR1 is 10, SIGTERM 15).
        signal: i32,
        /// The global step the ranks completed and agreed on.
        global_step: u64,
        /// The checkpoint's JSON record (`step-<N>.json`), written at that step.
        checkpoint: Option<std::path::PathBuf>,
    },
    /// The tensor library failed to read a result.
    #[error("reading a tensor failed: {0}")]
    Tensor(String),
}

impl From<phalanx_checkpoint::Error> for Error {
    fn from(e: phalanx_checkpoint::Error) -> Error {
        use phalanx_checkpoint::Error as Checkpoint;
        match e {
            Checkpoint::Pg(e) => Error::Pg(e),
            Checkpoint::Ddp(e) => Error::Ddp(e),
            Checkpoint::Data(e) => Error::Data(e),
            other => Error::Checkpoint(other),
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
