//! The collectives among the ranks of one host over a [`ShmGroup`](phalanx_transport::shm::ShmGroup):
//! they read each other's shared buffers instead of sending bytes (docs/shm.md; the protocol is
//! Note [Shared-memory protocol] in `phalanx_transport::shm`). One file per collective:
//! `allreduce` (one step or pieces), `reduce_scatter` (equal or unequal blocks), `broadcast`,
//! `barrier`, `allgather` (and all_to_all of equal blocks). All_gather, all_to_all and
//! broadcast copy once, straight from the sender's memory, where the group allows it
//! (Note [Single copy] in `phalanx_transport::shm`) and [`select`](crate::select) says so
//! (Note [Choosing an algorithm]).

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
pub use reduce_scatter::{reduce_scatter_shm, reduce_scatter_shm_in_place};
