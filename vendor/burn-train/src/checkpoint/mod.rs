mod async_checkpoint;
mod base;
mod file;
mod strategy;

pub use async_checkpoint::*;
pub use base::*;
pub use file::*;
pub use strategy::*;
