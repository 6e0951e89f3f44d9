//! Shared vocabulary of phalanx: element types, reduce operations, the one registry of
//! environment variables, and the timeout model used by the store, rendezvous and collectives;
//! and the leaves every crate needs once: the crash-safe file write ([`mod@file`]), hex ([`hex`])
//! and the host name ([`host`]).
//!
//! ```
//! use phalanx_core::{DType, ReduceOp, Element};
//! assert_eq!(DType::BF16.size(), 2);
//! assert_eq!(f32::DTYPE, DType::F32);
//! assert_eq!(f32::reduce(ReduceOp::Max, 1.0, 3.0), 3.0);
//! assert_eq!("avg".parse::<ReduceOp>().unwrap(), ReduceOp::Avg);
//! ```
#![warn(missing_docs, unreachable_pub)]

mod bytes;
mod dtype;
mod element;
pub mod env;
mod error;
pub mod file;
pub mod hex;
pub mod host;
pub mod job_proof;
mod launcher;
mod reduce_op;
mod timeout;
pub mod trace;

pub use bytes::parse_bytes;
pub use dtype::DType;
pub use element::Element;
pub use error::{Error, Result};
pub use launcher::{Launcher, EXIT_NO_REGROUP};
pub use reduce_op::ReduceOp;
pub use timeout::{parse_duration, Timeout, DEFAULT_TIMEOUT};
