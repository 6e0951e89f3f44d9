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

mod group;
mod py_store;

use pyo3::prelude::*;

pyo3::create_exception!(
    _native,
    PhalanxError,
    pyo3::exceptions::PyRuntimeError,
    "A phalanx collective failed; the message names the rank at fault."
);

/// phalanx's log level: `PHALANX_DEBUG`, else PyTorch's `TORCH_DISTRIBUTED_DEBUG` (`INFO`, or
/// `DETAIL` for debug), else warnings only; to stderr, as PyTorch's own logs.
fn init_logging() {
    let level = match (
        std::env::var("PHALANX_DEBUG").ok(),
        std::env::var("TORCH_DISTRIBUTED_DEBUG").ok(),
    ) {
        (Some(l), _) => l.to_ascii_lowercase(),
        (None, Some(t)) if t.eq_ignore_ascii_case("detail") => "debug".into(),
        (None, Some(t)) if t.eq_ignore_ascii_case("info") => "info".into(),
        _ => "warn".into(),
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
    m.add("PhalanxError", m.py().get_type::<PhalanxError>())?;
    Ok(())
}
