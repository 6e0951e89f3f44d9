//! data's integration tests as one test binary, one module per file (docs/architecture.md,
//! "One test binary per crate").

mod datasets_loading;
mod sampler_properties;
mod sampler_torch_parity;
