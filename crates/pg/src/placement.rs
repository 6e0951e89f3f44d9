//! Where a rank sits in its job: the numbers every backend needs (the native transport, MPI,
//! NCCL) before a group exists.

/// Where this rank sits, for [`ProcessGroup::new`](crate::ProcessGroup::new).
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    /// Global rank.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// Rank on this host.
    pub local_rank: usize,
    /// Ranks on this host.
    pub local_world_size: usize,
    /// Rank of this host's launcher agent (ranks share memory only within one node).
    pub node_rank: usize,
}
