mod async_logger;
mod base;
mod file;
mod in_memory;
mod metric;
mod progress;

pub use async_logger::*;
pub use base::*;
pub use file::*;
pub use in_memory::*;
pub use metric::*;
pub use progress::*;
