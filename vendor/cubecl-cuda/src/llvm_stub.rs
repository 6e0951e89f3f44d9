//! phalanx's vendored cubecl-cuda 0.11.3: the LLVM (pliron → NVPTX) backend is removed.
//!
//! Upstream depends on `cubecl-llvm` unconditionally, whose build script downloads an LLVM
//! bundle from GitHub and compiles C++ shims against it, so `burn/cuda` cannot be built
//! offline. This copy always compiles kernels through the CUDA C++ backend and NVRTC (upstream's
//! `cpp` feature), which needs neither; these stand-ins keep the rest of the crate unchanged.
//! See phalanx's docs/gpu.md.

use cubecl_core::ir::DeviceProperties;
use cubecl_core::ir::nvidia::SmArch;
use cubecl_core::prelude::KernelDefinition;
use cubecl_environment::backtrace::BackTrace;
use cubecl_server::compiler::CompilationError;
use cubecl_server::kernel::BufferIOAttr;

pub mod nvptx {
    pub mod ptx_version {
        pub use crate::ptx_version::PtxVersion;
    }
}

pub mod shared {
    pub mod lowered_features {
        use super::super::DeviceProperties;

        /// Only NVPTX existed here; nothing is narrowed without the LLVM backend.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum GpuTarget {
            Nvptx,
        }

        pub fn restrict_features(_props: &mut DeviceProperties, _target: GpuTarget) {}
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LlvmTarget {
    Nvptx,
}

#[derive(Default)]
pub struct PlironOptions {
    pub arch: Option<String>,
    pub sm_arch: Option<SmArch>,
    pub ptx_version: Option<crate::ptx_version::PtxVersion>,
    pub grid_constants: bool,
}

#[derive(Clone, Debug)]
pub struct NvptxModule {
    pub ptx: Vec<core::ffi::c_char>,
    pub entrypoint: String,
    pub ir: String,
    pub shared_memory_size: usize,
    pub io: Vec<BufferIOAttr>,
}

pub enum PlironArtifact {
    NvptxCode(NvptxModule),
    None,
}

#[derive(Clone, Debug)]
pub struct PlironCompiler {
    pub target: LlvmTarget,
}

impl PlironCompiler {
    pub fn compile(
        &mut self,
        _kernel: KernelDefinition,
        _options: &PlironOptions,
    ) -> Result<PlironArtifact, CompilationError> {
        Err(CompilationError::Generic {
            reason: "this build of cubecl-cuda has no LLVM backend (phalanx's vendored copy): \
                     kernels compile through CUDA C++ and NVRTC"
                .to_string(),
            backtrace: BackTrace::capture(),
        })
    }

    pub fn lang_tag(&self) -> &'static str {
        "llvm"
    }
}
