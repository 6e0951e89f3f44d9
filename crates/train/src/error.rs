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
    /// The tensor library failed to read a result.
    #[error("reading a tensor failed: {0}")]
    Tensor(String),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
