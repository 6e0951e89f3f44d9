pub(crate) mod aggregate;

mod base;
mod client;
mod log;

pub(crate) use self::log::*;
pub use base::*;
pub use client::*;
