//! The error type of `phalanx-tensor-parallel`.

/// What a tensor-parallel split refuses.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The group's size does not divide the dimension to split.
    #[error("{size} ranks cannot split {len} {what}: the tensor-parallel size must divide it")]
    Indivisible {
        /// What is split (`output columns`, `heads`, …).
        what: &'static str,
        /// Its length.
        len: usize,
        /// The tensor-parallel size.
        size: usize,
    },
    /// A piece whose length is not its shape's, or an axis it does not have.
    #[error("a piece of {len} values cannot have shape {shape:?} split on axis {axis}")]
    Piece {
        /// The shape given.
        shape: Vec<usize>,
        /// The piece's length.
        len: usize,
        /// The axis given.
        axis: usize,
    },
    /// The group's collective failed.
    #[error(transparent)]
    Pg(#[from] phalanx_pg::Error),
    /// A rank outside the group.
    #[error("rank {rank} is not in a tensor-parallel group of {size}")]
    Rank {
        /// The rank given.
        rank: usize,
        /// The group's size.
        size: usize,
    },
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
