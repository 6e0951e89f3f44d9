//! [`PhalanxError`], the one Python exception the native module raises
//! (`phalanx_torch.PhalanxError`).

// Declared in the module `phalanx_torch` (which re-exports it) rather than `_native`: the name
// pickle records must import, and PyTorch pickles a failed future's exception (DDP's reducer,
// Ray's workers) to hand it on; `_native` alone is not an importable module.
pyo3::create_exception!(
    phalanx_torch,
    PhalanxError,
    pyo3::exceptions::PyRuntimeError,
    "A phalanx collective failed; the message names the rank at fault."
);
