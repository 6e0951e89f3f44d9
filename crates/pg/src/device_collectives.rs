//! [`DeviceSlice`]: GPU memory handed to the NCCL backend's device-buffer collectives
//! (`ProcessGroup::allreduce_device`, `broadcast_device`), what keeps DDP buckets on the
//! device (Note [Device buckets] in `phalanx-ddp`).
//!
//! The host-slice collectives of [`ProcessGroup`](crate::ProcessGroup) stage every buffer through the GPU (Note
//! [NCCL buffers] in `nccl/mod.rs`); these take a [`DeviceSlice`] instead, memory that already
//! lives on this rank's GPU (a Burn CUDA tensor, a `cudarc` buffer), and run NCCL on it in
//! place: no copy to or from the host. They block until NCCL is done with the memory, with the
//! same timeout, abort and fail-fast as every other collective.
//!
//! ```no_run
//! // Under `phalanx launch --nproc-per-node 2 --backend nccl` on a machine with 2 GPUs; `ptr`
//! // is 1024 f32 of this rank's GPU memory, written by work that has completed.
//! use phalanx_core::{DType, ReduceOp};
//! use phalanx_pg::DeviceSlice;
//! # let ptr: u64 = 0;
//! let pg = phalanx_pg::init_nccl().unwrap();
//! let grads = DeviceSlice { ptr, len: 1024, dtype: DType::F32 };
//! // SAFETY: `ptr` holds 1024 f32 on this rank's GPU; nothing else touches them meanwhile.
//! unsafe { pg.allreduce_device(grads, ReduceOp::Avg) }.unwrap();
//! ```
use phalanx_core::DType;

/// `len` elements of `dtype` at device address `ptr`, in the memory of this rank's GPU (the
/// device `LOCAL_RANK` names, in its primary context: the one Burn's CUDA backend uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceSlice {
    /// The device address (`CUdeviceptr`) of the first element.
    pub ptr: u64,
    /// Number of elements.
    pub len: usize,
    /// Element type.
    pub dtype: DType,
}

impl DeviceSlice {
    /// What the flight recorder notes of it (Note [Flight recorder]).
    pub(crate) fn shape(&self) -> crate::flight_recorder::Shape {
        crate::flight_recorder::Shape {
            dtype: self.dtype,
            input: self.len,
            output: self.len,
            peer: None,
        }
    }
}
