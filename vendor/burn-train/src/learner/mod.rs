#[cfg(feature = "rl")]
mod rl;
#[cfg(feature = "rl")]
pub use rl::*;

mod application_logger;
mod base;
mod classification;
mod early_stopping;
mod error;
mod regression;
mod sequence;
mod sharder;
mod summary;
mod supervised;
mod train_val;

pub use application_logger::*;
pub use base::*;
pub use classification::*;
pub use early_stopping::*;
pub use error::*;
pub use regression::*;
pub use sequence::*;
pub use sharder::*;
pub use summary::*;
pub use supervised::*;
pub use train_val::*;
