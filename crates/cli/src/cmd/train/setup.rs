//! What a training rank checks and joins before it trains: the device and backend this binary
//! can run (refused at once, naming the missing feature, GPU or library), the process group of
//! the chosen backend, and the panic hook that fails the whole group fast. Shared by `train`
//! and the benchmarks.

use std::sync::Arc;

use anyhow::{bail, Context};
use phalanx_core::Launcher;
use phalanx_pg::BackendType;
use phalanx_train::DeviceSpec;

/// Refuses a device this binary lacks, and CUDA on a machine without a usable GPU (before
/// any rank starts; each rank checks its own GPU again).
pub(crate) fn check_device(device: DeviceSpec) -> anyhow::Result<()> {
    if !device.is_built() {
        bail!(
            "--device {device}: this phalanx binary was built without the `cuda` feature; \
             rebuild it with `cargo build --release -p phalanx-cli --features cuda` (builds \
             without a CUDA toolkit; running needs the NVIDIA driver, NVRTC and the CUDA \
             headers; docs/gpu.md)"
        );
    }
    if device != DeviceSpec::Cpu && !phalanx_launch::started_by_launcher() {
        let n = match phalanx_train::cuda_device_count() {
            Ok(n) => n,
            Err(why) => bail!("--device {device}: {why}"),
        };
        if let DeviceSpec::Cuda(Some(i)) = device {
            if i >= n {
                bail!("--device {device}: GPU {i} does not exist: the CUDA driver sees {n} GPU(s)");
            }
        }
    }
    Ok(())
}

/// Refuses a backend this binary lacks, and `--nproc-per-node` with MPI (mpirun starts the
/// ranks). Shared by `train` and the benchmarks.
pub(crate) fn check_backend(backend: BackendType) -> anyhow::Result<()> {
    if let Some(refusal) = not_built(backend, backend.is_built()) {
        bail!(refusal);
    }
    #[cfg(feature = "nccl")]
    if backend == BackendType::Nccl && !phalanx_launch::started_by_launcher() {
        // Fail before starting ranks, naming what is missing; each rank checks its GPU again.
        match phalanx_pg::nccl_probe() {
            Ok(found) => tracing::info!("--backend nccl: {found}"),
            Err(e) => bail!(
                "--backend nccl: {}",
                e.to_string().trim_start_matches("backend nccl: ")
            ),
        }
    }
    if backend == BackendType::Mpi && std::env::args().any(|a| a.starts_with("--nproc-per-node")) {
        bail!(
            "--backend mpi takes its ranks from MPI: start it as `mpirun -np N phalanx …` \
             instead of --nproc-per-node"
        );
    }
    if backend == BackendType::Mpi
        && Launcher::mpi().is_none()
        && matches!(
            Launcher::detect(),
            Some(Launcher::Phalanx | Launcher::Torchrun)
        )
    {
        // Each process would init MPI alone and train as a world of one, N times over.
        bail!(
            "--backend mpi needs an MPI launcher, but this process was started by phalanx \
             launch or torchrun (RANK is set) where each rank would be an MPI world of its own; \
             start it as `mpirun -np N phalanx …`"
        );
    }
    Ok(())
}

/// Why `backend` cannot run when this binary was built without its feature (`built` false),
/// naming the feature and the command that adds it; `None` when it was built. A function of
/// its own so that a build with every feature still tests the words a build without one says.
fn not_built(backend: BackendType, built: bool) -> Option<String> {
    if built || backend == BackendType::Native {
        return None;
    }
    let needs = match backend {
        BackendType::Nccl => "builds without a CUDA toolkit; running needs NCCL and a GPU",
        _ => "needs an MPI library, e.g. Debian's libopenmpi-dev, and libclang-dev",
    };
    Some(format!(
        "--backend {backend}: this phalanx binary was built without the `{backend}` feature; \
         rebuild it with `cargo build --release -p phalanx-cli --features {backend}` ({needs})"
    ))
}

/// Joins the process group of `backend`: the native one from the launcher's environment, or
/// MPI's world (docs/mpi.md).
pub(crate) fn join_group(backend: BackendType) -> anyhow::Result<phalanx_pg::ProcessGroup> {
    phalanx_pg::init_backend(backend)
        .with_context(|| format!("joining the process group (backend {backend})"))
}

/// A panic in this rank publishes the reason and aborts the group, so the other ranks fail at
/// once naming this rank instead of waiting for a timeout. The hook holds the group weakly:
/// dropping the last `Arc` still closes it (and, with MPI, finalises MPI).
pub(crate) fn install_failure_hook(pg: &Arc<phalanx_pg::ProcessGroup>) {
    pg.abort_on_panic();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_built_without_its_feature_is_refused_naming_it() {
        for backend in [BackendType::Mpi, BackendType::Nccl] {
            let why = not_built(backend, false).unwrap();
            assert!(
                why.contains(&format!("built without the `{backend}` feature"))
                    && why.contains(&format!("--features {backend}")),
                "{why}"
            );
            assert_eq!(not_built(backend, true), None);
        }
        assert!(not_built(BackendType::Mpi, false)
            .unwrap()
            .contains("libopenmpi-dev"));
        assert!(not_built(BackendType::Nccl, false)
            .unwrap()
            .contains("NCCL and a GPU"));
        assert_eq!(not_built(BackendType::Native, false), None);
    }
}
