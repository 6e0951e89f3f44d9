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

use std::sync::Arc;

use mpi::{environment::Universe, ffi, topology::Communicator, Threading};
use phalanx_collectives::Options;
use phalanx_store::HashStore;
use phalanx_transport::AbortHandle;

use crate::{exec::Links, Error, Placement, ProcessGroup, Result};

// The collectives (`impl MpiComm`): their own file, a child module so that they reach the
// fields of `MpiComm`.
#[path = "mpi_ops.rs"]
mod ops;

/// The MPI world of this process; dropping it finalises MPI.
pub(crate) struct MpiComm {
    rank: usize,
    world_size: usize,
    /// The library's `MPI_IN_PLACE` (Note [MPI_IN_PLACE]); `None`: reduce from a copy.
    in_place: Option<usize>,
    /// Send buffer when in place is unknown.
    scratch: Vec<u8>,
    /// Declared last: dropped after everything above, it calls `MPI_Finalize`.
    _universe: Universe,
}

/// Joins the MPI job this process was started in (`mpirun -np N …`; a process started
/// without `mpirun` is a world of one) and returns its process group. Rank and world size
/// come from `MPI_Comm_rank`/`MPI_Comm_size`; ranks on this host from
/// `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`. MPI is finalised when the group is dropped;
/// one group per process.
///
/// ```no_run
/// // Run under `mpirun -np 2`.
/// use phalanx_core::ReduceOp;
/// let pg = phalanx_pg::init_mpi().unwrap();
/// let mut x = [pg.rank() as f32 + 1.0];
/// pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
/// assert_eq!(x[0], (pg.world_size() * (pg.world_size() + 1) / 2) as f32);
/// ```
pub fn init_mpi() -> Result<ProcessGroup> {
    let (universe, threading) =
        mpi::initialize_with_threading(Threading::Serialized).ok_or_else(|| Error::Backend {
            backend: "mpi",
            reason:
                "MPI is already initialised in this process (one MPI process group per process)"
                    .into(),
        })?;
    if threading < Threading::Serialized {
        return Err(Error::Backend {
            backend: "mpi",
            reason: format!(
                "the MPI library offers only {threading:?} threading; phalanx calls MPI from \
                 its worker thread and needs MPI_THREAD_SERIALIZED or higher"
            ),
        });
    }
    let world = universe.world();
    let (rank, world_size) = (world.rank() as usize, world.size() as usize);
    let (local_rank, local_world_size) = {
        let local = world.split_shared(world.rank());
        (local.rank() as usize, local.size() as usize)
    };
    let library = mpi::environment::library_version().unwrap_or_default();
    let library = library
        .lines()
        .next()
        .unwrap_or("unknown")
        .trim()
        .to_string();
    let in_place = in_place_sentinel(&library);
    tracing::info!(
        rank,
        world_size,
        local_rank,
        local_world_size,
        backend = "mpi",
        threading = ?threading,
        %library,
        in_place = in_place.is_some(),
        "phalanx: init (every collective runs in the MPI library)"
    );
    let placement = Placement {
        rank,
        world_size,
        local_rank,
        local_world_size,
        node_rank: rank / local_world_size.max(1),
    };
    let comm = MpiComm {
        rank,
        world_size,
        in_place,
        scratch: Vec::new(),
        _universe: universe,
    };
    Ok(ProcessGroup::with_links(
        placement,
        Links::Mpi(comm),
        AbortHandle::default(),
        None,
        Arc::new(HashStore::new()),
        None,
        Options::default(),
    ))
}

// Note [MPI_IN_PLACE]: the MPI standard defines MPI_IN_PLACE as a macro, which bindgen cannot
// export, and mpi-sys does not wrap it. Its value is part of each implementation's ABI:
// `(void *) 1` in Open MPI's mpi.h, `(void *) -1` in MPICH's (also Intel MPI and MVAPICH).
// Any other library reduces from a copy of the buffer instead (one memcpy per call).
fn in_place_sentinel(library: &str) -> Option<usize> {
    if library.contains("Open MPI") {
        Some(1)
    } else if library.contains("MPICH") || library.contains("Intel(R) MPI") {
        Some(usize::MAX)
    } else {
        None
    }
}

/// `MPI_Abort` on the world: `mpirun` ends every rank. Does not return.
pub(crate) fn abort_job(rank: usize, cause: &str) {
    let who = if cause.starts_with("rank ") {
        String::new()
    } else {
        format!("rank {rank}: ")
    };
    eprintln!("phalanx: {who}{cause}; calling MPI_Abort so that every rank stops");
    // SAFETY: MPI is initialised while a group exists; MPI_Abort takes no Rust memory.
    unsafe {
        ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_follows_the_library() {
        assert_eq!(
            in_place_sentinel("Open MPI v4.1.4, package: Debian OpenMPI"),
            Some(1)
        );
        assert_eq!(in_place_sentinel("MPICH Version:\t4.0.2"), Some(usize::MAX));
        assert_eq!(in_place_sentinel("Some Other MPI 1.0"), None);
    }
}
