//! What a training rank checks and joins before it trains: the device and backend this binary
//! can run (refused at once, naming the missing feature, GPU or library), the process group of
//! the chosen backend, and the panic hook that fails the whole group fast. Shared by `train`
//! and the benchmarks.

use std::sync::Arc;

use anyhow::{bail, Context};
use phalanx_core::Launcher;
use phalanx_pg::Backend;
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
pub(crate) fn check_backend(backend: Backend) -> anyhow::Result<()> {
    if !backend.is_built() {
        let needs = match backend {
            Backend::Nccl => "builds without a CUDA toolkit; running needs NCCL and a GPU",
            _ => "needs an MPI library, e.g. Debian's libopenmpi-dev, and libclang-dev",
        };
        bail!(
            "--backend {backend}: this phalanx binary was built without the `{backend}` feature; \
             rebuild it with `cargo build --release -p phalanx-cli --features {backend}` \
             ({needs})"
        );
    }
    #[cfg(feature = "nccl")]
    if backend == Backend::Nccl && !phalanx_launch::started_by_launcher() {
        // Fail before starting ranks, naming what is missing; each rank checks its GPU again.
        match phalanx_pg::nccl_probe() {
            Ok(found) => tracing::info!("--backend nccl: {found}"),
            Err(e) => bail!(
                "--backend nccl: {}",
                e.to_string().trim_start_matches("backend nccl: ")
            ),
        }
    }
    if backend == Backend::Mpi && std::env::args().any(|a| a.starts_with("--nproc-per-node")) {
        bail!(
            "--backend mpi takes its ranks from MPI: start it as `mpirun -np N phalanx …` \
             instead of --nproc-per-node"
        );
    }
    if backend == Backend::Mpi
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

/// Joins the process group of `backend`: the native one from the launcher's environment, or
/// MPI's world (docs/mpi.md).
pub(crate) fn join_group(backend: Backend) -> anyhow::Result<phalanx_pg::ProcessGroup> {
    phalanx_pg::init_backend(backend)
        .with_context(|| format!("joining the process group (backend {backend})"))
}

/// A panic in this rank publishes the reason and aborts the group, so the other ranks fail at
/// once naming this rank instead of waiting for a timeout. The hook holds the group weakly:
/// dropping the last `Arc` still closes it (and, with MPI, finalises MPI).
pub(crate) fn install_failure_hook(pg: &Arc<phalanx_pg::ProcessGroup>) {
    pg.abort_on_panic();
}
