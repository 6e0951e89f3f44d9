/// The trainer module.
pub mod train;
