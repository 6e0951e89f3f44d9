//! The error type of `phalanx-data`.

use std::path::PathBuf;

/// Errors raised by the sampler, the dataset loaders and the batch loader.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // === Sampler arguments ===
    /// `num_replicas` was zero.
    #[error("DistributedSampler: num_replicas must be at least 1")]
    ZeroReplicas,
    /// The rank is not in `0..num_replicas`.
    #[error("DistributedSampler: rank {rank} is out of range for num_replicas {num_replicas} (valid: 0..{num_replicas})")]
    InvalidRank {
        /// The rank given.
        rank: usize,
        /// The number of replicas.
        num_replicas: usize,
    },
    /// `drop_last` with fewer samples than replicas would give every rank nothing.
    #[error("DistributedSampler: drop_last with len {len} < num_replicas {num_replicas} leaves every rank empty")]
    DropLastTooFew {
        /// Dataset length.
        len: usize,
        /// The number of replicas.
        num_replicas: usize,
    },

    // === Files ===
    /// A file could not be opened or read (including a truncated gzip stream).
    #[error("{}: line {line}: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// The 1-based line being read when the error happened (0: before the first line).
        line: usize,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A CSV line could not be parsed.
    #[error("{}: line {line}: {reason}", file.display())]
    Parse {
        /// The file.
        file: PathBuf,
        /// The 1-based line.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// An IDX (MNIST) file is malformed or truncated.
    #[error("{}: byte offset {offset}: {reason}", file.display())]
    Idx {
        /// The file.
        file: PathBuf,
        /// The byte offset (in the decompressed stream) where the problem was found.
        offset: u64,
        /// What is wrong.
        reason: String,
    },

    // === Datasets and batching ===
    /// The dataset spec is not one of the known forms.
    #[error("unknown dataset {spec:?}: expected digits, mnist5k, synthetic[:N[:SEED]], csv:PATH or mnist-idx:DIR")]
    UnknownDataset {
        /// The spec given.
        spec: String,
    },
    /// The corpus spec of a language model is not one of the known forms.
    #[error("unknown text corpus {spec:?}: --model gpt trains on shakespeare or text:PATH (a file of text, tokenised byte-level)")]
    UnknownCorpus {
        /// The spec given.
        spec: String,
    },
    /// A text corpus was given to a model that takes feature rows.
    #[error("{spec} is a text corpus: train it with --model gpt (the other models take feature rows: digits, mnist5k, synthetic, csv:PATH, mnist-idx:DIR)")]
    TextCorpus {
        /// The spec given.
        spec: String,
    },
    /// A dataset was built from inconsistent parts.
    #[error("dataset {name}: {reason}")]
    InvalidDataset {
        /// The dataset's name.
        name: String,
        /// What is inconsistent.
        reason: String,
    },
    /// An argument (batch size, split fraction, …) is out of range.
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// Which argument.
        what: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// A sample index is past the end of the dataset.
    #[error("index {index} is out of range for dataset {name} of {len} samples")]
    IndexOutOfRange {
        /// The index.
        index: usize,
        /// The dataset's length.
        len: usize,
        /// The dataset's name.
        name: String,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
