pub(crate) mod epoch;
mod strategy;

pub use strategy::*;
