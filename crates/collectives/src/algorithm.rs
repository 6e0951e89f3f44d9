//! [`Algorithm`]: the name of the algorithm a collective ran, for logs and benchmarks.

/// Which algorithm a collective used (reported by `PHALANX_DEBUG=INFO` and benchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Nothing to exchange (one rank, or zero elements).
    Local,
    /// Direct exchange.
    Direct,
    /// Ring.
    Ring,
    /// Dissemination (barrier).
    Dissemination,
    /// Shared memory between the ranks of one host (`shm`).
    Shm,
    /// Inside hosts, then across them (`hierarchical`).
    Hierarchical,
}
