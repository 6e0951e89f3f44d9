//! collectives's integration tests as one test binary, one module per file (docs/architecture.md,
//! "One test binary per crate").

mod allreduce_sweep;
mod common;
mod hierarchical;
mod shm_allreduce;
mod shm_process;
