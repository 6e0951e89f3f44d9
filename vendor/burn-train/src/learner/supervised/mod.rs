mod paradigm;
mod step;
mod strategies;

pub use paradigm::*;
pub use step::*;
pub use strategies::*;
