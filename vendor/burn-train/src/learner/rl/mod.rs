mod checkpointer;
mod components;
mod env_runner;
mod off_policy;
mod output;
mod paradigm;
mod strategy;

pub use checkpointer::*;
pub use components::*;
pub use env_runner::*;
pub use off_policy::*;
pub use output::*;
pub use paradigm::*;
pub use strategy::*;
