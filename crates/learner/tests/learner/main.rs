//! learner's integration tests as one test binary, one module per file (docs/architecture.md,
//! "One test binary per crate").

mod common;
mod learner_agreement;
mod learner_launch;
mod learner_single;
mod learner_zero;
