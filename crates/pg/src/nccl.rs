//! The NCCL backend: allreduce, broadcast, allgather and reduce_scatter by NCCL on this
//! rank's GPU (`--backend nccl`, cargo feature `nccl`; docs/gpu.md).
//!
//! Setup ([`init_nccl`]): NCCL and the CUDA driver are loaded at run time (Note [Finding NCCL]
//! in `nccl_sys.rs`); the GPU is `LOCAL_RANK` (NCCL puts one rank on one GPU); `PHALANX_DEBUG`
//! and `PHALANX_SOCKET_IFNAME` become `NCCL_DEBUG` and `NCCL_SOCKET_IFNAME` unless the user set
//! those; the native process group is created as usual (its store and TCP mesh); rank 0 calls
//! `ncclGetUniqueId` and sets the 128 bytes in the store, the other ranks wait for that one key
//! (one request each); then `ncclCommInitRank`.
//!
//! Note [NCCL buffers]: the [`ProcessGroup`] API takes host slices, so each collective copies
//! the slice into a device buffer of this rank's GPU, runs NCCL on it on the group's stream and
//! copies the result back: [`DeviceBuffer`] and the `*_device` methods of `NcclComm` are the
//! device-side path, the host-slice methods wrap them, and [`ProcessGroup::allreduce_device`]
//! and [`ProcessGroup::broadcast_device`] (`device_collectives.rs`) expose it for memory already
//! on the GPU: DDP's device buckets (Note [Device buckets] in `phalanx-ddp`) are reduced there
//! in place. send/recv and the failure protocol use the native mesh.
//!
//! What differs from the native backend:
//! - NCCL's reduction order, so results are not bitwise equal to the native backend's.
//!   `Avg` is `Sum` followed by the division on the host, as in the native backend.
//! - A wait polls the stream and `ncclCommGetAsyncError`; after `PHALANX_TIMEOUT` without
//!   completion, or when the group is aborted, the communicator is aborted (`ncclCommAbort`)
//!   and the collective fails.

use std::{ffi::c_int, sync::Arc};

use phalanx_collectives::Options;
use phalanx_core::{env, Timeout};
use phalanx_transport::AbortHandle;

use crate::{
    exec::Links,
    nccl_sys::{self, Driver, Handle, Nccl, UniqueId},
    Error, Placement, ProcessGroup, Result,
};

/// The store key of the NCCL unique id (under the round's prefix).
const UNIQUE_ID_KEY: &str = "nccl/unique_id";

/// Joins the job as the native backend does (store, TCP mesh), then creates an
/// NCCL communicator over every rank on GPU `LOCAL_RANK`. Fails fast, naming what is missing,
/// when NCCL, the CUDA driver or that GPU is not there.
///
/// ```no_run
/// // Under `phalanx launch --nproc-per-node 2` on a machine with 2 GPUs.
/// use phalanx_core::ReduceOp;
/// let pg = phalanx_pg::init_nccl().unwrap();
/// let mut x = [pg.rank() as f32 + 1.0];
/// pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
/// assert_eq!(x[0], 3.0);
/// ```
pub fn init_nccl() -> Result<ProcessGroup> {
    // Before NCCL's first call, which reads them.
    map_env();
    let dist = crate::DistEnv::from_env()?;
    let (nccl, driver) = libraries()?;
    let gpu = Gpu::open(driver, dist.local_rank)?;
    // The native group itself, not `init_process_group`, which follows PHALANX_BACKEND (=nccl).
    let native = crate::init_with(crate::InitOptions::from_env()?)?;
    let rank = native.rank();
    let world_size = native.world_size();
    let backend = |reason: String| Error::Backend {
        backend: "nccl",
        reason: format!("rank {rank}: {reason}"),
    };
    let id = unique_id(&native, nccl)?;
    gpu.make_current().map_err(backend)?;
    let mut comm: Handle = std::ptr::null_mut();
    // SAFETY: `comm` is an out-pointer; `id` is the job's id; rank < world_size.
    let rc = unsafe { (nccl.ncclCommInitRank)(&mut comm, world_size as c_int, id, rank as c_int) };
    nccl.check("ncclCommInitRank", rc).map_err(backend)?;
    let mut stream: Handle = std::ptr::null_mut();
    // Non-blocking: the legacy default stream (used by other libraries) need not wait for it.
    // SAFETY: an out-pointer, under the current context.
    let rc = unsafe { (driver.cuStreamCreate)(&mut stream, 1) };
    driver.check("cuStreamCreate", rc).map_err(backend)?;
    tracing::info!(
        rank,
        world_size,
        backend = "nccl",
        gpu = %gpu.name,
        device = gpu.index,
        library = %nccl.path,
        driver = %driver.version(),
        version = %nccl.version(),
        nccl_debug = %std::env::var("NCCL_DEBUG").unwrap_or_default(),
        nccl_socket_ifname = %std::env::var("NCCL_SOCKET_IFNAME").unwrap_or_default(),
        "phalanx: init (allreduce, broadcast, allgather, reduce_scatter, barrier run in NCCL)"
    );
    let placement = Placement {
        rank,
        world_size,
        local_rank: native.local_rank(),
        local_world_size: native.local_world_size(),
        node_rank: dist.group_rank,
    };
    let abort = AbortHandle::default();
    let store = native.store().clone();
    let comm = NcclComm {
        nccl,
        driver,
        gpu,
        comm,
        stream,
        rank,
        world_size,
        scratch: None,
        timeout: Timeout::from_env()?,
        abort: abort.clone(),
        native: Arc::new(native),
    };
    Ok(ProcessGroup::with_links(
        placement,
        Links::Nccl(Box::new(comm)),
        abort,
        None,
        store,
        None,
        Options::default(),
    ))
}

/// What `--backend nccl` would use on this machine — `libnccl.so.2 (NCCL 2.27.3), CUDA 13.0,
/// 1 GPU(s)` — or an error naming everything missing (NCCL, the driver, a GPU). Loads the
/// libraries but creates no communicator; `phalanx` calls it before starting ranks.
///
/// ```
/// match phalanx_pg::nccl_probe() {
///     Ok(found) => assert!(found.contains("NCCL")),
///     Err(e) => assert!(e.to_string().contains("nccl")),
/// }
/// ```
pub fn nccl_probe() -> Result<String> {
    let (nccl, driver) = libraries()?;
    let mut n: c_int = 0;
    // SAFETY: an out-pointer.
    let rc = unsafe { (driver.cuDeviceGetCount)(&mut n) };
    if rc != 0 || n <= 0 {
        return Err(Error::Backend {
            backend: "nccl",
            reason: format!("the CUDA driver ({}) sees no GPU", driver.version()),
        });
    }
    Ok(format!(
        "{} (NCCL {}), {}, {n} GPU(s)",
        nccl.path,
        nccl.version(),
        driver.version()
    ))
}

/// NCCL and the driver, or one error naming everything missing.
fn libraries() -> Result<(&'static Nccl, &'static Driver)> {
    match (nccl_sys::nccl(), nccl_sys::driver()) {
        (Ok(n), Ok(d)) => Ok((n, d)),
        (n, d) => Err(Error::Backend {
            backend: "nccl",
            reason: [n.err(), d.err()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("; "),
        }),
    }
}

/// Note [NCCL variables]: users of torchrun set `NCCL_DEBUG` and `NCCL_SOCKET_IFNAME`; phalanx
/// users set `PHALANX_DEBUG` and `PHALANX_SOCKET_IFNAME` (same syntax). The phalanx ones are
/// copied onto the NCCL ones only when those are unset, before NCCL reads them (at its first
/// call), so a user's NCCL setting always wins.
fn map_env() {
    for (name, value) in nccl_env(&|k| std::env::var(k).ok().filter(|v| !v.is_empty())) {
        // Before any NCCL thread exists; phalanx's own threads do not read the environment.
        std::env::set_var(name, value);
    }
}

/// The NCCL variables to set, from a lookup of the environment.
fn nccl_env(get: &dyn Fn(&str) -> Option<String>) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if get("NCCL_DEBUG").is_none() {
        let level = get(env::PHALANX_DEBUG.name).map(|v| v.to_ascii_uppercase());
        match level.as_deref() {
            Some("INFO" | "DEBUG") => out.push(("NCCL_DEBUG", "INFO".to_string())),
            Some("TRACE") => out.push(("NCCL_DEBUG", "TRACE".to_string())),
            Some("WARN" | "ERROR") => out.push(("NCCL_DEBUG", "WARN".to_string())),
            _ => {}
        }
    }
    if get("NCCL_SOCKET_IFNAME").is_none() {
        if let Some(v) = get(env::PHALANX_SOCKET_IFNAME.name) {
            out.push(("NCCL_SOCKET_IFNAME", v));
        }
    }
    out
}

/// Rank 0 creates the id and sets it; every other rank waits for the key and reads it: one
/// set, or one wait and one get, per rank.
fn unique_id(pg: &ProcessGroup, nccl: &Nccl) -> Result<UniqueId> {
    let rank = pg.rank();
    let store_err = |source| Error::Store { rank, source };
    let store = pg.store();
    if rank == 0 {
        let mut id = UniqueId([0; 128]);
        // SAFETY: an out-pointer to 128 bytes.
        let rc = unsafe { (nccl.ncclGetUniqueId)(&mut id) };
        nccl.check("ncclGetUniqueId", rc)
            .map_err(|reason| Error::Backend {
                backend: "nccl",
                reason: format!("rank 0: {reason}"),
            })?;
        store.set(UNIQUE_ID_KEY, &id.0).map_err(store_err)?;
        Ok(id)
    } else {
        store.wait(&[UNIQUE_ID_KEY]).map_err(store_err)?;
        let bytes = store.get(UNIQUE_ID_KEY).map_err(store_err)?;
        let id: [u8; 128] = bytes.as_slice().try_into().map_err(|_| Error::Backend {
            backend: "nccl",
            reason: format!(
                "rank {rank}: store key {UNIQUE_ID_KEY} holds {} bytes, not NCCL's 128",
                bytes.len()
            ),
        })?;
        Ok(UniqueId(id))
    }
}

pub(crate) use crate::nccl_comm::NcclComm;
use crate::nccl_device::Gpu;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl_comm::{nccl_op, nccl_type};
    use phalanx_core::{DType, ReduceOp};

    fn lookup(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn phalanx_variables_map_onto_unset_nccl_ones() {
        let got = nccl_env(&lookup(&[
            ("PHALANX_DEBUG", "info"),
            ("PHALANX_SOCKET_IFNAME", "^docker,lo"),
        ]));
        assert_eq!(
            got,
            vec![
                ("NCCL_DEBUG", "INFO".to_string()),
                ("NCCL_SOCKET_IFNAME", "^docker,lo".to_string())
            ]
        );
    }

    #[test]
    fn a_users_nccl_variables_win() {
        let got = nccl_env(&lookup(&[
            ("PHALANX_DEBUG", "INFO"),
            ("NCCL_DEBUG", "WARN"),
            ("PHALANX_SOCKET_IFNAME", "eth1"),
            ("NCCL_SOCKET_IFNAME", "ib0"),
        ]));
        assert!(got.is_empty(), "{got:?}");
        assert!(nccl_env(&lookup(&[])).is_empty());
    }

    #[test]
    fn every_dtype_and_op_has_an_nccl_code() {
        let types: Vec<c_int> = [
            DType::U8,
            DType::I32,
            DType::I64,
            DType::F16,
            DType::F32,
            DType::F64,
            DType::BF16,
        ]
        .into_iter()
        .map(nccl_type)
        .collect();
        assert_eq!(types, [1, 2, 4, 6, 7, 8, 9]);
        assert_eq!(nccl_op(ReduceOp::Avg), nccl_op(ReduceOp::Sum));
        assert_eq!(nccl_op(ReduceOp::Min), 3);
    }
}
