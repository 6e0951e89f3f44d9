mod base;
mod builder;

pub(crate) mod components;

pub use base::*;
pub use builder::*;
pub use components::{EvaluatorComponentTypes, EvaluatorComponentTypesMarker};
