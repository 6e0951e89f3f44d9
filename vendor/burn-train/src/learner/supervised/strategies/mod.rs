mod base;

pub(crate) mod ddp;
pub(crate) mod multi;
pub(crate) mod single;

pub use base::*;
