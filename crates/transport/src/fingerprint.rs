//! The fingerprint every frame of a collective carries.
//!
//! Note [Always-on fingerprints]: each data frame names the collective it belongs to
//! (sequence number, kind, reduce op, dtype, element count, root). A receiver compares it with
//! its own expectation before touching the payload, so ranks that called different collectives,
//! or the same one with different sizes, fail at once with both sides named instead of
//! deadlocking or reducing garbage. It costs 32 bytes per frame and no extra round trip, so
//! it is never switched off (unlike PyTorch's `TORCH_DISTRIBUTED_DEBUG=DETAIL` checks, which
//! cost a collective each and are off by default).

use std::fmt;

use phalanx_core::{DType, ReduceOp};

/// Which collective a frame belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CollectiveKind {
    /// allreduce
    Allreduce = 1,
    /// broadcast
    Broadcast = 2,
    /// allgather
    Allgather = 3,
    /// reduce_scatter
    ReduceScatter = 4,
    /// barrier
    Barrier = 5,
    /// point-to-point send/recv
    SendRecv = 6,
    /// mesh bootstrap and other internal traffic
    Internal = 7,
    /// reduce to a root
    Reduce = 8,
    /// gather to a root
    Gather = 9,
    /// scatter from a root
    Scatter = 10,
    /// all_to_all (equal or unequal splits)
    AllToAll = 11,
    /// allgather of unequal blocks (MPI's Allgatherv)
    AllgatherV = 12,
    /// reduce_scatter of unequal blocks (MPI's Reduce_scatter)
    ReduceScatterV = 13,
}

impl CollectiveKind {
    /// Name as users know it.
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::Allreduce => "allreduce",
            CollectiveKind::Broadcast => "broadcast",
            CollectiveKind::Allgather => "allgather",
            CollectiveKind::ReduceScatter => "reduce_scatter",
            CollectiveKind::Barrier => "barrier",
            CollectiveKind::SendRecv => "send/recv",
            CollectiveKind::Internal => "internal",
            CollectiveKind::Reduce => "reduce",
            CollectiveKind::Gather => "gather",
            CollectiveKind::Scatter => "scatter",
            CollectiveKind::AllToAll => "all_to_all",
            CollectiveKind::AllgatherV => "allgather_v",
            CollectiveKind::ReduceScatterV => "reduce_scatter_v",
        }
    }

    /// Decodes a wire code.
    pub fn from_code(c: u8) -> Option<Self> {
        use CollectiveKind::*;
        [
            Allreduce,
            Broadcast,
            Allgather,
            ReduceScatter,
            Barrier,
            SendRecv,
            Internal,
            Reduce,
            Gather,
            Scatter,
            AllToAll,
            AllgatherV,
            ReduceScatterV,
        ]
        .into_iter()
        .find(|k| *k as u8 == c)
    }
}

/// Identity of one collective call; equal on every rank that makes the same call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    /// Per-group sequence number of the call (0, 1, 2, … in issue order).
    pub seq: u64,
    /// The collective.
    pub kind: CollectiveKind,
    /// Reduce op, for reducing collectives.
    pub op: Option<ReduceOp>,
    /// Element type.
    pub dtype: DType,
    /// Element count as the caller passed it (the full buffer, not this frame's share).
    pub count: u64,
    /// Root rank (broadcast, reduce, gather, scatter) or tag (send/recv); 0 otherwise.
    pub root: u32,
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} #{} ", self.kind.name(), self.seq)?;
        if let Some(op) = self.op {
            write!(f, "{op} ")?;
        }
        write!(f, "{} count={}", self.dtype, self.count)?;
        match self.kind {
            CollectiveKind::Broadcast
            | CollectiveKind::Reduce
            | CollectiveKind::Gather
            | CollectiveKind::Scatter => write!(f, " root={}", self.root),
            CollectiveKind::SendRecv => write!(f, " tag={}", self.root),
            _ => Ok(()),
        }
    }
}
