//! pg's integration tests as one test binary, one module per file (docs/architecture.md,
//! "One test binary per crate").

mod collective_sweeps;
mod mesh;
mod mpi_collectives;
mod p2p;
mod pg_collectives;
mod rendezvous_scale;
mod subgroups;
