//! train's integration tests as one test binary, one module per file (docs/architecture.md,
//! "One test binary per crate").

mod train_ddp;
mod train_local;
