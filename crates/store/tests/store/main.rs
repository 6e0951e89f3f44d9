//! store's integration tests as one test binary, one module per file (docs/architecture.md,
//! "One test binary per crate").

mod common;
mod store_connections;
mod store_etcd;
mod store_hardening;
mod store_tcp;
mod store_torch;
