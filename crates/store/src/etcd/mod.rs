//! The job's store in etcd: [`EtcdOptions`] (where the cluster is and how to reach it, read
//! from `PHALANX_ETCD_*`), compiled in every build, and the client, `EtcdStore` with its
//! `EtcdLease` and the client of its polls (`client.rs`, `lease.rs`, `poll.rs`; connecting in
//! `connect.rs`, telling a failed request's fate in `failure.rs`), behind the crate's `etcd`
//! feature (on by default).
//!
//! Note [A build without the etcd client]: the client brings gRPC with it (tonic, hyper, h2,
//! tower, rustls, ring), which the fuzz targets' decoders never reach: in their sanitized
//! release build it was 51 of the 99 crates and 40 % of the CPU time (333 CPU-s with it, 200
//! without, on 2 cores). So `fuzz/` builds this crate and phalanx-pg without it; every other
//! build has it. The options stay in every build, so that a program told to use etcd by a
//! build without the client says so, naming the endpoints (phalanx-pg's `job_store`). Only the
//! fuzz build compiles that branch; it is a few lines, and no other build needs the gap closed.

#[cfg(feature = "etcd")]
mod client;
#[cfg(feature = "etcd")]
mod connect;
#[cfg(feature = "etcd")]
mod failure;
#[cfg(feature = "etcd")]
mod lease;
mod options;
#[cfg(feature = "etcd")]
mod poll;

#[cfg(feature = "etcd")]
pub use client::EtcdStore;
#[cfg(feature = "etcd")]
pub use lease::EtcdLease;
pub use options::EtcdOptions;
