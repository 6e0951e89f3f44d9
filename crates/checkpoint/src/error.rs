//! The error type of `phalanx-checkpoint`.

/// What can go wrong writing, reading or loading a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A checkpoint could not be written, or is damaged or malformed.
    #[error("checkpoint {}: {reason}", path.display())]
    Checkpoint {
        /// The file involved.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A checkpoint that verifies but does not fit the module or optimizer it is loaded into
    /// (`state_dict::load`): nothing was loaded.
    #[error("checkpoint {}: {mismatch}", path.display())]
    Mismatch {
        /// Its commit record (`step-<N>.json`).
        path: std::path::PathBuf,
        /// The tensor that does not fit, and how.
        mismatch: Mismatch,
    },
    /// The optimizer's state could not be read or written.
    #[error("{0}")]
    OptimizerState(String),
    /// A parameter read or write failed.
    #[error(transparent)]
    Ddp(#[from] phalanx_ddp::Error),
    /// A collective of a sharded checkpoint or of a handover failed (the error names the rank
    /// and the cause).
    #[error(transparent)]
    Pg(#[from] phalanx_pg::Error),
    /// The data position does not fit the dataset.
    #[error("data: {0}")]
    Data(#[from] phalanx_data::Error),
}

/// How a checkpoint does not fit the module it is loaded into (shapes in the checkpoint's
/// layout, PyTorch's: a `Linear` weight is `[out, in]`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Mismatch {
    /// The module has a tensor the checkpoint lacks.
    #[error("the module's tensor {name} {shape:?} is not in the checkpoint")]
    Missing {
        /// Module path.
        name: String,
        /// Its shape in the module.
        shape: Vec<usize>,
    },
    /// The checkpoint has a tensor the module lacks (another architecture).
    #[error("its tensor {name} {shape:?} is not in the module")]
    Unexpected {
        /// Module path.
        name: String,
        /// Its shape in the checkpoint.
        shape: Vec<usize>,
    },
    /// A tensor of both, of different shapes.
    #[error("tensor {name} is {checkpoint:?} in the checkpoint, {model:?} in the module")]
    Shape {
        /// Module path.
        name: String,
        /// The checkpoint's shape.
        checkpoint: Vec<usize>,
        /// The module's.
        model: Vec<usize>,
    },
    /// The optimizer's state does not fit the module's parameters or the optimizer.
    #[error("the optimizer's state: {0}")]
    OptimizerState(String),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
