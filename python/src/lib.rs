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

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<group::Group>()?;
    m.add("PhalanxError", m.py().get_type::<PhalanxError>())?;
    Ok(())
}
