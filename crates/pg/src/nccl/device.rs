//! This rank's GPU and its device buffers, for the NCCL backend (Note [NCCL buffers] in
//! `nccl/mod.rs`).

use std::ffi::{c_char, c_int};

use super::sys::{DevicePtr, Driver, Handle};
use crate::{Error, Result};

/// This rank's GPU and its primary context (the one Burn's CUDA backend also uses).
pub(crate) struct Gpu {
    pub(crate) driver: &'static Driver,
    pub(crate) index: usize,
    pub(crate) ctx: Handle,
    pub(crate) name: String,
}

impl Gpu {
    pub(crate) fn open(driver: &'static Driver, index: usize) -> Result<Gpu> {
        let fail = |reason: String| Error::Backend {
            backend: "nccl",
            reason,
        };
        let mut n: c_int = 0;
        // SAFETY: an out-pointer.
        let rc = unsafe { (driver.cuDeviceGetCount)(&mut n) };
        driver.check("cuDeviceGetCount", rc).map_err(fail)?;
        if index >= n as usize {
            return Err(fail(format!(
                "NCCL puts one rank on one GPU: LOCAL_RANK {index} needs GPU {index}, but the \
                 CUDA driver sees {n} GPU(s). Use at most {n} rank(s) per node, or --backend \
                 native for ranks that share a GPU (gradients then reduce on the host)"
            )));
        }
        let mut dev: c_int = 0;
        let mut ctx: Handle = std::ptr::null_mut();
        let mut name = [0 as c_char; 128];
        // SAFETY: out-pointers; `index` is below the device count.
        unsafe {
            driver
                .check(
                    "cuDeviceGet",
                    (driver.cuDeviceGet)(&mut dev, index as c_int),
                )
                .map_err(fail)?;
            driver
                .check(
                    "cuDevicePrimaryCtxRetain",
                    (driver.cuDevicePrimaryCtxRetain)(&mut ctx, dev),
                )
                .map_err(fail)?;
            (driver.cuDeviceGetName)(name.as_mut_ptr(), name.len() as c_int, dev);
        }
        // SAFETY: cuDeviceGetName wrote a NUL-terminated string into the zeroed array.
        let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(Gpu {
            driver,
            index,
            ctx,
            name,
        })
    }

    /// Makes the primary context current on the calling thread (collectives run on the
    /// caller's thread or the group's worker thread).
    pub(crate) fn make_current(&self) -> std::result::Result<(), String> {
        // SAFETY: a context retained for the process's lifetime.
        let rc = unsafe { (self.driver.cuCtxSetCurrent)(self.ctx) };
        self.driver.check("cuCtxSetCurrent", rc)
    }
}

/// A buffer in this rank's GPU memory (Note [NCCL buffers]).
pub(crate) struct DeviceBuffer {
    pub(crate) driver: &'static Driver,
    pub(crate) ptr: DevicePtr,
    pub(crate) bytes: usize,
}

impl DeviceBuffer {
    pub(crate) fn new(
        driver: &'static Driver,
        bytes: usize,
    ) -> std::result::Result<DeviceBuffer, String> {
        let mut ptr: DevicePtr = 0;
        // SAFETY: an out-pointer; at least one byte so that the pointer is valid.
        let rc = unsafe { (driver.cuMemAlloc_v2)(&mut ptr, bytes.max(1)) };
        driver
            .check("cuMemAlloc", rc)
            .map_err(|e| format!("{e} ({bytes} bytes)"))?;
        Ok(DeviceBuffer { driver, ptr, bytes })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc; no work on it is pending (every wait completes).
        unsafe { (self.driver.cuMemFree_v2)(self.ptr) };
    }
}
