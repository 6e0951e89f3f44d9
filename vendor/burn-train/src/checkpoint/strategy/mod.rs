mod base;
mod composed;
mod lastn;
mod metric;

pub use base::*;
pub use composed::*;
pub use lastn::*;
pub use metric::*;
