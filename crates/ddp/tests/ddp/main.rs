//! phalanx-ddp's integration tests, in one test binary: each file is a module (see
//! docs/testing.md, "One test binary per crate").

mod adapter_burn;
mod common;
mod ddp_model_state;
mod ddp_ranks;
mod fsdp_blocks;
mod fsdp_modes;
mod outer;
