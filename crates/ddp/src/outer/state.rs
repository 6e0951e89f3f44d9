//! What a rank's outer sync holds and costs, apart from the mesh it runs on: the figures
//! ([`OuterStats`]), the state that goes from one generation's [`DiLoCo`](super::DiLoCo) to the
//! next under fault tolerance ([`OuterState`], Note [Islands that leave and join]) and the
//! state a checkpoint keeps ([`OuterSnapshot`], Note [Island checkpoints] in phalanx-train).

use std::time::Duration;

use super::fragment::Fragment;

/// What the outer syncs cost so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OuterStats {
    /// Outer syncs done (under streaming DiLoCo, each fragment's sync counts once).
    pub syncs: u64,
    /// Wall time inside them.
    pub wait: Duration,
    /// Bytes this rank sent across islands (the encoded pseudo-gradient's share of the ring
    /// or of the all-to-all and all-gather, by the algorithm's count, not the wire's).
    pub bytes_across: u64,
}

/// What a rank's outer sync holds between two attempts of a run under fault tolerance
/// ([`DiLoCo::into_state`](super::DiLoCo::into_state), [`DiLoCo::heal`](super::DiLoCo::heal)): this rank's chunks of the global parameters and
/// momentum, where the schedule stands, and the figures.
#[derive(Debug, Clone)]
pub struct OuterState {
    pub(super) lens: Vec<usize>,
    pub(super) fragments: Vec<Fragment>,
    /// The island rank whose chunks these are.
    pub(super) chunk_of: usize,
    pub(super) steps: u64,
    pub(super) synced_at: u64,
    pub(super) stats: OuterStats,
    /// Read from a checkpoint: the chunks, laid out when the engine is at hand.
    pub(super) saved: Option<OuterSnapshot>,
}

/// What a rank's outer sync holds, as a checkpoint keeps it ([`DiLoCo::snapshot`](super::DiLoCo::snapshot),
/// [`OuterState::restore`]): where the schedule stands, this rank's chunk of each fragment's
/// global parameters and momentum, and the pseudo-gradient of a sync under way.
#[derive(Debug, Clone, PartialEq)]
pub struct OuterSnapshot {
    /// Inner steps since the start.
    pub steps: u64,
    /// The inner step whose sync ended last.
    pub synced_at: u64,
    /// Syncs done.
    pub syncs: u64,
    /// This rank's island.
    pub island: usize,
    /// This rank's rank in its island: which chunk it holds.
    pub chunk_of: usize,
    /// Ranks per island.
    pub island_size: usize,
    /// Each fragment's chunk of the global parameters.
    pub global: Vec<Vec<f32>>,
    /// Each fragment's chunk of the outer momentum.
    pub momentum: Vec<Vec<f32>>,
    /// The fragment whose sync is under way, and the pseudo-gradient it sent.
    pub pending: Option<(usize, Vec<f32>)>,
}

impl OuterState {
    /// The state a checkpoint kept, for [`DiLoCo::heal`](super::DiLoCo::heal): resumed at the same layout, the run
    /// goes on bitwise as if never stopped.
    pub fn restore(saved: OuterSnapshot) -> OuterState {
        OuterState {
            lens: Vec::new(),
            fragments: Vec::new(),
            chunk_of: saved.chunk_of,
            steps: saved.steps,
            synced_at: saved.synced_at,
            stats: OuterStats {
                syncs: saved.syncs,
                ..OuterStats::default()
            },
            saved: Some(saved),
        }
    }
}
