//! The NCCL backend: allreduce, broadcast, allgather and reduce_scatter by NCCL on this
//! rank's GPU (`--backend nccl`, cargo feature `nccl`; docs/gpu.md).
//!
//! Setup (`init_nccl` in `init.rs`): NCCL and the CUDA driver are loaded at run time (Note [Finding NCCL]
//! in `sys.rs`); the GPU is `LOCAL_RANK` (NCCL puts one rank on one GPU); phalanx's log
//! level and interface setting become `NCCL_DEBUG` and `NCCL_SOCKET_IFNAME` unless the user set
//! those (Note [NCCL variables]); the native process group is created as usual (its store and TCP mesh); rank 0 calls
//! `ncclGetUniqueId` and sets the 128 bytes in the store, the other ranks wait for that one key
//! (one request each); then `ncclCommInitRank`.
//!
//! Note [NCCL buffers]: the [`ProcessGroup`] API takes host slices, so each collective copies
//! the slice into a device buffer of this rank's GPU, runs NCCL on it on the group's stream and
//! copies the result back: `DeviceBuffer` and the `*_device` methods of `NcclComm` are the
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

mod comm;
mod device;
pub(crate) mod sys;

use std::ffi::c_int;

use phalanx_core::env;

pub(crate) use comm::{NativeGroup, NcclComm};
use device::Gpu;
use sys::{Driver, Nccl};

use crate::{Error, Result};

/// NCCL, the driver and GPU `local_rank`, loaded and opened before the job is joined, so that
/// a missing library or GPU fails at once; maps the phalanx variables onto NCCL's first
/// (Note [NCCL variables]).
pub(crate) fn open(local_rank: usize) -> Result<(&'static Nccl, &'static Driver, Gpu)> {
    map_env();
    let (nccl, driver) = libraries()?;
    let gpu = Gpu::open(driver, local_rank)?;
    Ok((nccl, driver, gpu))
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
    match (sys::nccl(), sys::driver()) {
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
/// users set `PHALANX_DEBUG` and `PHALANX_SOCKET_IFNAME` (same syntax). NCCL reads only its
/// own, so phalanx's settings are copied onto them when they are unset, before NCCL reads them
/// (at its first call), and a user's NCCL setting always wins for NCCL.
///
/// The settings copied are the ones phalanx itself uses, decided by the same functions
/// (Note [Borrowed variables] in phalanx-core): the interface from `PHALANX_SOCKET_IFNAME`,
/// else `GLOO_SOCKET_IFNAME` (Gloo's exact names, so `eth1,eth2` becomes `=eth1,eth2`); the
/// level from `PHALANX_DEBUG`, else `TORCH_DISTRIBUTED_DEBUG`, as WARN, INFO or TRACE. So the
/// NCCL backend and phalanx's own transport pick the same interface, whichever variable the
/// user set. A level that does not parse is left out (the log setup already warned about it).
fn map_env() {
    for (name, value) in nccl_env(&|k| std::env::var(k).ok().filter(|v| !v.is_empty())) {
        // Before any NCCL thread exists; phalanx's own threads do not read the environment.
        std::env::set_var(name, value);
    }
}

/// The NCCL variables to set, from a lookup of the environment.
fn nccl_env(get: &dyn Fn(&str) -> Option<String>) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if get(env::NCCL_DEBUG.name).is_none() {
        // Only a level some variable asked for: NCCL's own default (nothing set) stays.
        if let Ok(env::LogSetting {
            level,
            origin: Some(_),
        }) = env::log_level_in(get)
        {
            out.push((env::NCCL_DEBUG.name, level.nccl().to_string()));
        }
    }
    if get(env::NCCL_SOCKET_IFNAME.name).is_none() {
        if let Some(s) = env::socket_ifname_in(get) {
            out.push((env::NCCL_SOCKET_IFNAME.name, s.nccl_spec()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::comm::{nccl_op, nccl_type};
    use super::*;
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
    fn pytorch_variables_map_onto_unset_nccl_ones_in_nccls_syntax() {
        let got = nccl_env(&lookup(&[
            ("TORCH_DISTRIBUTED_DEBUG", "DETAIL"),
            ("GLOO_SOCKET_IFNAME", "eth1,eth2"),
        ]));
        assert_eq!(
            got,
            vec![
                ("NCCL_DEBUG", "TRACE".to_string()),
                ("NCCL_SOCKET_IFNAME", "=eth1,eth2".to_string())
            ]
        );
        // PHALANX_ wins over GLOO_/TORCH_ (the same precedence as the native transport).
        let got = nccl_env(&lookup(&[
            ("PHALANX_DEBUG", "WARN"),
            ("TORCH_DISTRIBUTED_DEBUG", "DETAIL"),
            ("PHALANX_SOCKET_IFNAME", "^docker"),
            ("GLOO_SOCKET_IFNAME", "eth1"),
        ]));
        assert_eq!(
            got,
            vec![
                ("NCCL_DEBUG", "WARN".to_string()),
                ("NCCL_SOCKET_IFNAME", "^docker".to_string())
            ]
        );
        // A level that is no level sets nothing (the log setup warns, naming the variable).
        assert!(nccl_env(&lookup(&[("PHALANX_DEBUG", "LOUD")])).is_empty());
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
