//! Page-locked host memory for GPU buffers that are reduced on the host: [`PinnedStaging`].
//!
//! Note [Pinned staging]: when ranks share one GPU (or a GPU job runs without NCCL), gradients
//! go through host memory to the native transport, as Gloo does with CUDA tensors. Copies
//! between the GPU and *pageable* memory go through a driver bounce buffer at a fraction of the
//! link's speed; page-locked memory is copied by the GPU's DMA engines directly. So the staging
//! buffer is allocated once with `cuMemHostAlloc` (portable: usable from any context), grown to
//! the largest buffer staged, and reused every step: the allreduce then runs on it in place.
//!
//! ```no_run
//! // `ptr`: 1024 f32 on this process's GPU, written by work that has completed.
//! use phalanx_core::{DType, ReduceOp};
//! use phalanx_pg::{DeviceSlice, PinnedStaging};
//! # let ptr: u64 = 0;
//! let pg = phalanx_pg::init_process_group().unwrap(); // native: TCP, shared memory
//! let grads = DeviceSlice { ptr, len: 1024, dtype: DType::F32 };
//! let mut staging = PinnedStaging::new().unwrap();
//! // SAFETY: `ptr` holds 1024 f32 of GPU memory that nothing else touches meanwhile.
//! unsafe {
//!     let host = staging.download(grads).unwrap();
//!     pg.allreduce(bytemuck::cast_slice_mut::<u8, f32>(host), ReduceOp::Avg).unwrap();
//!     staging.upload(grads).unwrap();
//! }
//! ```
use std::ffi::{c_int, c_void};

use crate::{
    nccl::sys::{self, Driver, Handle},
    DeviceSlice, Error, Result,
};

/// `CU_POINTER_ATTRIBUTE_CONTEXT`.
const POINTER_CONTEXT: c_int = 1;
/// `CU_MEMHOSTALLOC_PORTABLE`: page-locked for every context, not only the current one.
const HOST_ALLOC_PORTABLE: u32 = 0x01;

/// A reusable page-locked host buffer that GPU memory is copied into and back from.
pub struct PinnedStaging {
    driver: &'static Driver,
    ptr: *mut c_void,
    bytes: usize,
}

// SAFETY: the buffer is plain host memory owned by this value; the driver's functions may be
// called from any thread.
unsafe impl Send for PinnedStaging {}

fn fail(reason: String) -> Error {
    Error::Backend {
        backend: "cuda",
        reason,
    }
}

impl PinnedStaging {
    /// Loads the CUDA driver (an error names what is missing); allocates nothing yet.
    pub fn new() -> Result<PinnedStaging> {
        let driver = sys::driver().map_err(fail)?;
        Ok(PinnedStaging {
            driver,
            ptr: std::ptr::null_mut(),
            bytes: 0,
        })
    }

    /// Bytes of page-locked memory held.
    pub fn capacity(&self) -> usize {
        self.bytes
    }

    /// Copies `src` into the staging buffer (growing it if needed) and returns those bytes.
    ///
    /// # Safety
    /// `src` describes memory of a GPU of this process holding `src.len` elements of
    /// `src.dtype`, written by work that has completed.
    pub unsafe fn download(&mut self, src: DeviceSlice) -> Result<&mut [u8]> {
        let bytes = src.len * src.dtype.size();
        self.make_current(src)?;
        self.reserve(bytes)?;
        // SAFETY: the buffer has room for `bytes`; the caller's contract for `src`.
        let rc = unsafe { (self.driver.cuMemcpyDtoH_v2)(self.ptr, src.ptr, bytes) };
        self.driver.check("cuMemcpyDtoH", rc).map_err(fail)?;
        // SAFETY: `bytes` initialised bytes of the buffer, borrowed mutably from `self`.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<u8>(), bytes) })
    }

    /// Copies the first `dst.len` elements of the staging buffer back into `dst`.
    ///
    /// # Safety
    /// As [`download`](Self::download), for `dst`; nothing else reads or writes it meanwhile.
    pub unsafe fn upload(&self, dst: DeviceSlice) -> Result<()> {
        let bytes = dst.len * dst.dtype.size();
        if bytes > self.bytes {
            return Err(fail(format!(
                "upload of {bytes} bytes from a staging buffer of {} (download first)",
                self.bytes
            )));
        }
        self.make_current(dst)?;
        // SAFETY: the buffer holds `bytes`; the caller's contract for `dst`.
        let rc = unsafe { (self.driver.cuMemcpyHtoD_v2)(dst.ptr, self.ptr, bytes) };
        self.driver.check("cuMemcpyHtoD", rc).map_err(fail)
    }

    /// Makes the context that owns `slice` current on this thread (Burn's, from whichever
    /// thread DDP runs on).
    fn make_current(&self, slice: DeviceSlice) -> Result<()> {
        let mut ctx: Handle = std::ptr::null_mut();
        // SAFETY: an out-pointer of the attribute's type (a CUcontext).
        let rc = unsafe {
            (self.driver.cuPointerGetAttribute)(
                (&mut ctx as *mut Handle).cast(),
                POINTER_CONTEXT,
                slice.ptr,
            )
        };
        self.driver
            .check("cuPointerGetAttribute(CONTEXT)", rc)
            .map_err(|e| fail(format!("{e}: {:#x} is not GPU memory", slice.ptr)))?;
        // SAFETY: the context of a live allocation.
        let rc = unsafe { (self.driver.cuCtxSetCurrent)(ctx) };
        self.driver.check("cuCtxSetCurrent", rc).map_err(fail)
    }

    fn reserve(&mut self, bytes: usize) -> Result<()> {
        if bytes <= self.bytes {
            return Ok(());
        }
        self.release();
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: an out-pointer; a current context (make_current ran).
        let rc = unsafe { (self.driver.cuMemHostAlloc)(&mut ptr, bytes, HOST_ALLOC_PORTABLE) };
        self.driver
            .check("cuMemHostAlloc", rc)
            .map_err(|e| fail(format!("{e} ({bytes} bytes of page-locked memory)")))?;
        self.ptr = ptr;
        self.bytes = bytes;
        Ok(())
    }

    fn release(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: allocated by cuMemHostAlloc; no copy is in flight (they are synchronous).
            unsafe { (self.driver.cuMemFreeHost)(self.ptr) };
            self.ptr = std::ptr::null_mut();
            self.bytes = 0;
        }
    }
}

impl Drop for PinnedStaging {
    fn drop(&mut self) {
        self.release();
    }
}
