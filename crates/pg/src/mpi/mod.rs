//! The MPI backend: every collective is one call of the MPI library on `MPI_COMM_WORLD`.
//!
//! Mapping: allreduce → `MPI_Allreduce` (in place), broadcast → `MPI_Bcast`, allgather →
//! `MPI_Allgather`, reduce_scatter → `MPI_Reduce_scatter_block`, barrier → `MPI_Barrier`,
//! send/recv → `MPI_Send`/`MPI_Recv` with the caller's tag. Data that is only moved travels
//! as bytes; reductions use MPI's types (`float`, `double`, `int32_t`, `int64_t`, `uint8_t`)
//! and built-in ops (`Sum`, `Min`, `Max`, `Product`). `Avg` is `Sum` followed by a division
//! by the world size on every rank, as in Gloo. bf16 and f16 have no MPI type: they are
//! widened to f32, reduced, and rounded back (exact for sums of small integers; otherwise
//! within one rounding of the f32 result).
//!
//! What differs from the native backend:
//! - The reduction order is the MPI library's, not phalanx's canonical order, so results are
//!   not bitwise equal to the native backend's (nor, across library versions, to each other).
//! - No fingerprints: MPI does not check that every rank called the same collective.
//! - No `PHALANX_TIMEOUT`: MPI calls wait as long as the library does. Errors are fatal
//!   (`MPI_ERRORS_ARE_FATAL`), and [`ProcessGroup::abort`] calls `MPI_Abort`, so `mpirun`
//!   ends every rank at once — the fail-fast of Note [Fail fast], by MPI's means.
//! - `ProcessGroup::store` is a store inside this process only (MPI needs no rendezvous).
//!
//! Threads: asynchronous collectives run on the group's worker thread and blocking ones in
//! the caller, one at a time under the `Exec` lock, so `MPI_THREAD_SERIALIZED` suffices.

mod comm;
mod types;

pub(crate) use comm::MpiComm;
