//! The collectives among the ranks of one host over a [`ShmGroup`](phalanx_transport::shm::ShmGroup):
//! they read each other's shared buffers instead of sending bytes (docs/shm.md; the protocol is
//! Note [Shared-memory protocol] in `phalanx_transport::shm`). One file per collective:
//! `allreduce` (one step or pieces), `reduce_scatter` (through the allreduce), `broadcast`,
//! `barrier`, `allgather` (and all_to_all of equal blocks). All_gather, all_to_all and
//! broadcast copy once, straight from the sender's memory, where the group allows it
//! (Note [Single copy] in `phalanx_transport::shm`) and blocks are at least
//! [`single_copy_min_bytes`].

mod allgather;
pub mod allreduce;
mod barrier;
mod broadcast;
mod bytes;
mod reduce_scatter;

pub(crate) use allgather::allgather_slices;
pub use allgather::{all_to_all_shm, allgather_shm};
pub use allreduce::{
    allreduce_shm, allreduce_shm_with, auto_chunk_bytes, ShmOptions, SHM_SMALL_MAX_BYTES,
};
pub use barrier::barrier_shm;
pub use broadcast::broadcast_shm;
pub use reduce_scatter::reduce_scatter_shm;

/// Blocks (bytes per rank) from which all_gather and all_to_all read the sender's memory
/// directly when the group allows it (Note [Single copy] in `phalanx_transport::shm`): below,
/// two copies through the cache-resident shared buffers cost less than the system calls and
/// the second step. With more than two ranks the extra step costs more (every rank must be
/// scheduled for it; measured with 4 ranks on 2 cores), so the bar is higher (docs/shm.md).
pub fn single_copy_min_bytes(world: usize) -> usize {
    match world {
        0..=2 => 16 * 1024,
        _ => 128 * 1024,
    }
}
