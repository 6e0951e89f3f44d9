//! The native module of `phalanx_torch` (`phalanx_torch._native`): phalanx's process group
//! for PyTorch's CPU tensors. The Python half (`phalanx_torch/__init__.py`) registers the
//! torch.distributed backend `"phalanx"` on top of it:
//!
//! ```python
//! import torch, torch.distributed as dist
//! import phalanx_torch  # registers "phalanx"
//! dist.init_process_group("phalanx")  # under `phalanx launch` or torchrun
//! t = torch.ones(1024)
//! dist.all_reduce(t)  # phalanx's shared memory on a host, TCP between hosts
//! ```

mod error;
mod fault_tolerance;
mod group;
mod py_store;

use pyo3::prelude::*;

pub(crate) use error::PhalanxError;

/// phalanx's log level: `PHALANX_DEBUG`, else `NCCL_DEBUG`, else PyTorch's
/// `TORCH_DISTRIBUTED_DEBUG` (the same choice as phalanx's own programs:
/// `phalanx_core::env::log_level`), else warnings only; to stderr, as PyTorch's own logs.
fn init_logging() {
    let level = match phalanx_core::env::log_level() {
        Ok(s) => s.level.filter(),
        Err(e) => {
            eprintln!("phalanx_torch: {e}; logging warnings only");
            "warn"
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(tracing_subscriber::EnvFilter::new(level))
        .try_init();
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    init_logging();
    m.add_class::<group::Group>()?;
    m.add_class::<fault_tolerance::FaultTolerance>()?;
    m.add("EXIT_NO_REGROUP", phalanx_core::EXIT_NO_REGROUP)?;
    m.add("PhalanxError", m.py().get_type::<PhalanxError>())?;
    Ok(())
}
