//! Collectives on GPU memory: the NCCL backend's device-buffer API, what keeps DDP buckets on
//! the device (Note [Device buckets] in `phalanx-ddp`).
//!
//! The host-slice collectives of [`ProcessGroup`] stage every buffer through the GPU (Note
//! [NCCL buffers] in `nccl.rs`); these take a [`DeviceSlice`] instead, memory that already
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
use phalanx_collectives::Algorithm;
use phalanx_core::{DType, ReduceOp};

use crate::{exec::Links, nccl_comm::nccl_op, Error, ProcessGroup, Result};

/// NCCL's `ncclAvg` (NCCL 2.10 and later): the division happens on the device.
const NCCL_AVG: std::ffi::c_int = 4;

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
    fn bytes(&self) -> usize {
        self.len * self.dtype.size()
    }
}

impl ProcessGroup {
    /// Whether this group runs collectives on GPU memory ([`allreduce_device`]
    /// (Self::allreduce_device)): the NCCL backend does, the native and MPI backends do not.
    pub fn supports_device_buffers(&self) -> bool {
        matches!(self.shared.exec.lock().unwrap().links, Links::Nccl(_))
    }

    /// Reduces `buf` across ranks in place, on the GPU. `Avg` divides on the device
    /// (`ncclAvg`). Blocks until the result is in `buf`.
    ///
    /// # Safety
    /// `buf` describes memory of this rank's GPU holding `buf.len` elements of `buf.dtype`; the
    /// work that wrote it has completed, and nothing reads or writes it until this returns.
    pub unsafe fn allreduce_device(&self, buf: DeviceSlice, op: ReduceOp) -> Result<()> {
        self.require_device_buffers("allreduce_device")?;
        self.blocking("allreduce", buf.bytes(), |_, t, _| {
            let Links::Nccl(n) = &mut t.links else {
                unreachable!("checked by require_device_buffers; a group keeps its backend")
            };
            let code = if op == ReduceOp::Avg {
                NCCL_AVG
            } else {
                nccl_op(op)
            };
            n.make_current()?;
            // SAFETY: the caller's contract.
            unsafe { n.allreduce_device_code(buf.ptr, buf.len, buf.dtype, code)? };
            n.wait("ncclAllReduce")?;
            Ok(((), Algorithm::Direct))
        })
    }

    /// Copies `root`'s `buf` to every rank, on the GPU. Blocks until the result is in `buf`.
    ///
    /// # Safety
    /// As [`allreduce_device`](Self::allreduce_device).
    pub unsafe fn broadcast_device(&self, buf: DeviceSlice, root: usize) -> Result<()> {
        self.require_device_buffers("broadcast_device")?;
        self.check_rank(root, "broadcast root")?;
        self.blocking("broadcast", buf.bytes(), |_, t, _| {
            let Links::Nccl(n) = &mut t.links else {
                unreachable!("checked by require_device_buffers; a group keeps its backend")
            };
            n.make_current()?;
            // SAFETY: the caller's contract.
            unsafe { n.broadcast_device(buf.ptr, buf.len, buf.dtype, root)? };
            n.wait("ncclBroadcast")?;
            Ok(((), Algorithm::Direct))
        })
    }

    fn require_device_buffers(&self, op: &'static str) -> Result<()> {
        if self.supports_device_buffers() {
            return Ok(());
        }
        Err(Error::Backend {
            backend: "nccl",
            reason: format!(
                "{op} takes GPU memory, which only the nccl backend reduces in place, and this \
                 process group does not run on it (use the host-slice collectives, or \
                 --backend nccl)"
            ),
        })
    }
}
