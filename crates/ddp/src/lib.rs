//! phalanx-ddp: DistributedDataParallel for Burn models.
#![warn(missing_docs, unreachable_pub)]

pub mod adapter;
pub mod bucket;
mod error;

pub use error::{Error, Result};
