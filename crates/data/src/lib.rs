//! Data for distributed training: a `DistributedSampler` that gives exactly the indices
//! PyTorch's gives, an exact-evaluation sharding, the datasets phalanx trains on (vendored
//! digits and MNIST subsets, synthetic, CSV, MNIST IDX; text corpora as windows of byte tokens), and batching with prefetch.
//! No network is used.
//!
//! ```
//! use std::sync::Arc;
//! use phalanx_data::{DataLoader, DistributedSampler};
//!
//! let data = Arc::new(phalanx_data::load("digits")?);
//! let (world_size, rank) = (2, 0);
//! let sampler = DistributedSampler::new(data.len(), world_size, rank)?.with_seed(42);
//! for epoch in 0..2 {
//!     let indices = sampler.indices(epoch); // same on every rank: PyTorch's order
//!     for batch in DataLoader::new(data.clone(), indices, 64)?.iter() {
//!         assert_eq!(batch.features.len(), batch.len() * data.dim());
//!     }
//! }
//! # Ok::<(), phalanx_data::Error>(())
//! ```
#![warn(missing_docs, unreachable_pub)]

mod csv;
mod dataset;
mod error;
mod idx;
mod loader;
mod randperm;
mod sampler;
mod spec;
mod synthetic;
mod text;
mod vendored;

pub use crate::csv::csv;
pub use dataset::Dataset;
pub use error::{Error, Result};
pub use idx::{mnist_idx, mnist_idx_test};
pub use loader::{Batch, Batches, DataLoader, DEFAULT_PREFETCH};
pub use randperm::{randperm, RANDPERM_SMALL_LIMIT};
pub use sampler::{exact_shard, DistributedSampler};
pub use spec::load;
pub use synthetic::{synthetic, SYNTHETIC_CLASSES, SYNTHETIC_DIM};
pub use text::{load_text, shakespeare, text_windows, BYTE_VOCAB};
pub use vendored::{digits, mnist5k};
