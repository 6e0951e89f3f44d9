//! [`Options`]: the tuning every collective takes (chunk size, direct-exchange threshold, shared
//! memory, the two-level layout), and the chunk length in elements it implies.

use crate::hierarchy::Hierarchy;

/// Tuning of algorithm choice; defaults measured on loopback TCP (see docs/collectives.md).
#[derive(Debug, Clone)]
pub struct Options {
    /// Largest frame of a pipelined ring step, in bytes.
    pub chunk_bytes: usize,
    /// Buffers up to this size (bytes) use direct exchange rather than the ring.
    pub direct_max_bytes: usize,
    /// Use shared memory when every rank is on one host (the process group decides at setup).
    pub shared_memory: bool,
    /// Asks for the two-level allreduce when hosts hold several ranks each
    /// (`PHALANX_ALGO=hierarchical`); the process group turns it into `hierarchy` if the
    /// layout qualifies.
    pub prefer_hierarchical: bool,
    /// Allreduce above `direct_max_bytes` in two levels, inside hosts then across them
    /// (`PHALANX_ALGO=hierarchical`; see [`Hierarchy`] for what it gives up). Set by the process
    /// group from its peer table; `None`: the flat algorithms, in the canonical order.
    pub hierarchy: Option<Hierarchy>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            chunk_bytes: 512 * 1024,
            direct_max_bytes: 64 * 1024,
            shared_memory: true,
            prefer_hierarchical: false,
            hierarchy: None,
        }
    }
}

/// Elements of `T` in one ring chunk (`chunk_bytes`, at least one element).
pub(crate) fn chunk_elems<T>(opts: &Options) -> usize {
    (opts.chunk_bytes / std::mem::size_of::<T>().max(1)).max(1)
}
