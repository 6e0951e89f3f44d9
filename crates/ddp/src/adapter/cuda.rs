//! Device addresses of Burn's CUDA tensors, so that NCCL can reduce them where they are (Note
//! [Device buckets] in `adapter/device_buckets.rs`). Built with the `cuda` and `nccl` features.
//!
//! Burn 0.22 has no public "device pointer" call; the path down is Burn's own extension API:
//! the tensor's primitive on the CubeCL backend (a fusion handle), resolved to the CubeCL
//! tensor (which runs the fused kernels still queued for it), then CubeCL's storage resource
//! for its buffer, which on CUDA carries the `CUdeviceptr` (with the buffer's offset applied).
//! The resource is held while NCCL works on the memory: CubeCL neither frees nor moves a bound
//! allocation.

use burn::backend::DispatchDevice;
use burn::tensor::{DType, Device, Tensor};
use burn_cubecl::cubecl::{cuda::CudaRuntime, future::block_on};
use burn_cubecl::{Cube, CubeBackend, CubeDevice};
use cubecl_runtime::runtime::Runtime;
use phalanx_pg::DeviceSlice;

use crate::{Error, Result};

/// CubeCL's CUDA server, named through its runtime (the crate does not export the type).
type CudaServer = <CudaRuntime as Runtime>::Server;

/// Whether `device` is a CUDA GPU.
pub(crate) fn is_cuda(device: &Device) -> bool {
    matches!(
        device.clone().without_autodiff().as_dispatch(),
        DispatchDevice::Cube(CubeDevice::Cuda(_))
    )
}

/// Runs `f` with the device memory of `tensor` (a contiguous `f32` CUDA tensor, such as the
/// output of `Tensor::cat`) once every kernel that writes it has completed. `f` may write the
/// memory in place; `tensor` sees what it wrote.
pub(crate) fn with_device_slice<R>(
    tensor: &Tensor<1>,
    bucket: usize,
    f: impl FnOnce(DeviceSlice) -> Result<R>,
) -> Result<R> {
    let fail = |reason: String| Error::Tensor {
        name: format!("gradient bucket {bucket}"),
        reason,
    };
    if tensor.dtype() != DType::F32 {
        return Err(fail(format!(
            "device buckets hold f32 gradients, got {:?}",
            tensor.dtype()
        )));
    }
    let len = tensor.shape().num_elements();
    // A clone keeps the caller's tensor alive, so resolving the fusion handle reads it
    // (read-only) instead of consuming it: the caller's tensor keeps the same buffer.
    let fused = tensor
        .clone()
        .try_into_primitive::<Cube>()
        .map_err(|e| fail(format!("not a CubeCL tensor: {e:?}")))?;
    let cube = fused
        .client
        .clone()
        .resolve_tensor_float::<CubeBackend>(fused);
    // NCCL runs on its own stream: the kernels that produced the bucket must be done.
    block_on(cube.client.sync()).map_err(|e| fail(format!("waiting for the GPU: {e}")))?;
    let resource = cube
        .client
        .get_resource::<CudaServer>(cube.handle.clone())
        .map_err(|e| fail(format!("the tensor's CUDA buffer: {e}")))?;
    let gpu = resource.resource();
    if (gpu.size as usize) < len * 4 {
        return Err(fail(format!(
            "CUDA buffer of {} bytes for {len} f32",
            gpu.size
        )));
    }
    let slice = DeviceSlice {
        ptr: gpu.ptr,
        len,
        dtype: phalanx_core::DType::F32,
    };
    let out = f(slice);
    drop(resource);
    out
}

#[cfg(test)]
mod tests;
