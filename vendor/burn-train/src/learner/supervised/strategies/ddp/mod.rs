mod epoch;
mod strategy;
mod worker;

pub use strategy::*;
