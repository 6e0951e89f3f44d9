//! The error type of `phalanx-core`.

/// Errors raised while reading configuration shared by every crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An environment variable holds a value that cannot be used.
    #[error("environment variable {name}={value:?} is invalid: {reason}")]
    InvalidEnv {
        /// The variable's name.
        name: String,
        /// The value found.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// A textual value (flag or variable) could not be parsed.
    #[error("cannot parse {what} from {value:?}: {reason}")]
    Parse {
        /// What was being parsed ("dtype", "duration", …).
        what: &'static str,
        /// The text given.
        value: String,
        /// Why it was refused.
        reason: String,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
