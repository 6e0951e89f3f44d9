//! Gradient buckets that stay on the parameters' device ([`BucketMemory::Device`]).
//!
//! Note [Device buckets]
//! With host buckets (the default on CPU), each gradient is read back to host `f32`, packed,
//! averaged and rebuilt on its device (Note [Host-staged gradients] in `adapter/burn.rs`): on a
//! GPU that is two PCIe copies of the model per step. Device buckets are Burn tensors instead:
//! a bucket is the concatenation of its parameters' flattened gradients (`Tensor::cat`, a kernel
//! on the device), averaged in place, and each parameter's gradient is a slice of it, handed to
//! the optimizer without leaving the device. On a CUDA GPU with the NCCL backend, the average is
//! `ncclAllReduce(ncclAvg)` on the bucket's own memory (`adapter/cuda.rs` finds it): the
//! gradients never touch the host. On a CUDA GPU under another backend (ranks sharing one GPU),
//! the bucket is copied into page-locked host memory, allreduced there by the native transport
//! and copied back into the bucket (Note [Pinned staging] in `phalanx-pg`): one DMA copy each
//! way per bucket, as Gloo does for CUDA tensors. On any other device the bucket is read back
//! through Burn for the same allreduce (so results are bitwise equal to host buckets on CPU),
//! which is what the tests run on machines without a GPU.
//!
//! Buckets are launched in the same order and with the same assignment as host buckets; each
//! is averaged before the next is packed (NCCL is asynchronous to the host anyway, and on the
//! GPU the packing is a kernel launch). Communication hooks take host buffers, so device
//! buckets use the default allreduce.

use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::tensor::{Tensor, TensorData};
use phalanx_core::{trace, ReduceOp};
use phalanx_pg::ProcessGroup;

use super::burn::{GradTable, Gradients};
use crate::reducer::BucketLayout;
use crate::stats::CommStats;
use crate::step_header::Agreement;
use crate::{Error, Result};

/// How a device bucket is averaged.
// Without the GPU features only `ThroughHost` is ever chosen.
#[cfg_attr(not(all(feature = "cuda", feature = "nccl")), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Averaging {
    /// NCCL on the bucket's GPU memory, in place.
    InPlace,
    /// Copied from the GPU into page-locked host memory, allreduced there, copied back.
    Pinned,
    /// Read back through Burn, allreduced by the process group, rebuilt on the device.
    ThroughHost,
}

/// Per-bucket state of device buckets: gradients accumulated by `no_sync` steps.
pub(crate) struct DeviceReducer {
    averaging: Averaging,
    accumulated: Vec<Option<Tensor<1>>>,
    /// The page-locked buffer of `Averaging::Pinned`, allocated at the first bucket.
    #[cfg(all(feature = "cuda", feature = "nccl"))]
    staging: Option<phalanx_pg::PinnedStaging>,
}

impl DeviceReducer {
    pub(crate) fn new(averaging: Averaging, buckets: usize) -> Self {
        DeviceReducer {
            averaging,
            accumulated: (0..buckets).map(|_| None).collect(),
            #[cfg(all(feature = "cuda", feature = "nccl"))]
            staging: None,
        }
    }

    pub(crate) fn averaging(&self) -> Averaging {
        self.averaging
    }

    pub(crate) fn has_accumulated(&self) -> bool {
        self.accumulated.iter().any(Option::is_some)
    }

    /// A `no_sync` step: adds this step's buckets to the accumulators, on the device.
    pub(crate) fn accumulate(
        &mut self,
        table: &GradTable,
        buckets: &[BucketLayout],
        grads: &mut Gradients,
    ) {
        for (k, bucket) in buckets.iter().enumerate() {
            let flat = self.pack(k, table, bucket, Some(&mut *grads));
            self.accumulated[k] = Some(flat);
        }
    }

    /// A synchronising step: agrees on the step header (Note [Step header]; its own small host
    /// allreduce here), then packs, averages and hands each bucket to
    /// `drain(layout, bucket, agreement)` in launch order. Without `grads` (a joined rank
    /// shadowing the others) every gradient is zero.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn synchronize(
        &mut self,
        pg: &Arc<ProcessGroup>,
        table: &GradTable,
        buckets: &[BucketLayout],
        mut grads: Option<&mut Gradients>,
        mut header: Vec<f32>,
        stats: &mut CommStats,
        mut drain: impl FnMut(&BucketLayout, Tensor<1>, &Agreement),
    ) -> Result<Agreement> {
        let started = Instant::now();
        let mut waited = Duration::ZERO;
        let mut bytes = 0u64;
        let t = Instant::now();
        pg.allreduce(&mut header, ReduceOp::Sum)
            .map_err(|source| Error::Sync {
                op: "allreduce(step header)",
                source,
            })?;
        waited += t.elapsed();
        let agreement = Agreement::from_reduced(&header, table.len());
        for (k, bucket) in buckets.iter().enumerate() {
            let packing = trace::span("pack", "pack")
                .arg("bucket", k)
                .arg("bytes", bucket.len * 4);
            let flat = self.pack(k, table, bucket, grads.as_deref_mut());
            drop(packing);
            let t = Instant::now();
            let waiting = trace::span("wait", "wait").arg("bucket", k);
            let flat = self.average(pg, k, flat)?;
            drop(waiting);
            waited += t.elapsed();
            bytes += (bucket.len * 4) as u64;
            let _unpack = trace::span("unpack", "optimizer").arg("bucket", k);
            drain(bucket, flat, &agreement);
        }
        stats.record(waited, started.elapsed(), buckets.len(), bytes);
        Ok(agreement)
    }

    /// The bucket's gradients, flattened and concatenated on the device, plus what `no_sync`
    /// steps accumulated; zeros for a rank without gradients.
    fn pack(
        &mut self,
        k: usize,
        table: &GradTable,
        bucket: &BucketLayout,
        mut grads: Option<&mut Gradients>,
    ) -> Tensor<1> {
        let parts: Vec<Tensor<1>> = bucket
            .params
            .iter()
            .map(|&p| match grads.as_deref_mut() {
                Some(grads) => table.take_flat_grad(p, grads),
                None => table.zeros(p),
            })
            .collect();
        let flat = Tensor::cat(parts, 0);
        match self.accumulated[k].take() {
            Some(acc) => acc + flat,
            None => flat,
        }
    }

    fn average(&mut self, pg: &Arc<ProcessGroup>, k: usize, flat: Tensor<1>) -> Result<Tensor<1>> {
        let err = |source| Error::Collective {
            op: "allreduce",
            bucket: k,
            source,
        };
        match self.averaging {
            Averaging::InPlace => {
                average_in_place(pg, k, &flat)?;
                Ok(flat)
            }
            // The average over one rank is the bucket itself.
            Averaging::Pinned | Averaging::ThroughHost if pg.world_size() == 1 => Ok(flat),
            Averaging::Pinned => {
                self.average_pinned(pg, k, &flat)?;
                Ok(flat)
            }
            Averaging::ThroughHost => {
                let device = flat.device();
                let dtype = flat.dtype();
                let data = flat.try_into_data_as::<f32>().map_err(|e| Error::Tensor {
                    name: format!("gradient bucket {k}"),
                    reason: e.to_string(),
                })?;
                let mut host: Vec<f32> = data.try_into_vec::<f32>().map_err(|e| Error::Tensor {
                    name: format!("gradient bucket {k}"),
                    reason: format!("{e:?}"),
                })?;
                pg.allreduce(&mut host, ReduceOp::Avg).map_err(err)?;
                let len = host.len();
                Ok(Tensor::from_data(
                    TensorData::new(host, [len]),
                    (&device, dtype),
                ))
            }
        }
    }
}

impl DeviceReducer {
    #[cfg(all(feature = "cuda", feature = "nccl"))]
    fn average_pinned(&mut self, pg: &ProcessGroup, k: usize, flat: &Tensor<1>) -> Result<()> {
        let err = |source| Error::Collective {
            op: "allreduce(pinned)",
            bucket: k,
            source,
        };
        let staging = match &mut self.staging {
            Some(s) => s,
            empty => empty.insert(phalanx_pg::PinnedStaging::new().map_err(err)?),
        };
        crate::adapter::cuda::with_device_slice(flat, k, |slice| {
            // SAFETY: `with_device_slice` hands over the bucket's CUDA memory after the kernels
            // that wrote it completed, and holds it in place until this returns.
            let host = unsafe { staging.download(slice) }.map_err(err)?;
            pg.allreduce(bytemuck::cast_slice_mut::<u8, f32>(host), ReduceOp::Avg)
                .map_err(err)?;
            // SAFETY: as above.
            unsafe { staging.upload(slice) }.map_err(err)
        })
    }

    #[cfg(not(all(feature = "cuda", feature = "nccl")))]
    fn average_pinned(&mut self, _: &ProcessGroup, _: usize, _: &Tensor<1>) -> Result<()> {
        unreachable!("pinned staging is chosen only with the cuda and nccl features")
    }
}

#[cfg(all(feature = "cuda", feature = "nccl"))]
fn average_in_place(pg: &Arc<ProcessGroup>, k: usize, flat: &Tensor<1>) -> Result<()> {
    crate::adapter::cuda::with_device_slice(flat, k, |slice| {
        // SAFETY: `with_device_slice` hands over the bucket's CUDA memory after the kernels that
        // wrote it completed, and holds it in place until this returns; nothing else touches it.
        unsafe { pg.allreduce_device(slice, ReduceOp::Avg) }.map_err(|source| Error::Collective {
            op: "allreduce(device)",
            bucket: k,
            source,
        })
    })
}

#[cfg(not(all(feature = "cuda", feature = "nccl")))]
fn average_in_place(_: &Arc<ProcessGroup>, _: usize, _: &Tensor<1>) -> Result<()> {
    unreachable!("in-place averaging is chosen only with the cuda and nccl features")
}

/// How device buckets of a model whose first parameter is on `device` are averaged: in place
/// on a CUDA GPU under a group that reduces GPU memory (NCCL), through page-locked memory on a
/// CUDA GPU otherwise, through Burn's host copies on any other device.
#[cfg(all(feature = "cuda", feature = "nccl"))]
pub(crate) fn choose_averaging(pg: &ProcessGroup, device: &burn::tensor::Device) -> Averaging {
    match crate::adapter::cuda::is_cuda(device) {
        true if pg.supports_device_buffers() => Averaging::InPlace,
        true => Averaging::Pinned,
        false => Averaging::ThroughHost,
    }
}

#[cfg(not(all(feature = "cuda", feature = "nccl")))]
pub(crate) fn choose_averaging(_: &ProcessGroup, _: &burn::tensor::Device) -> Averaging {
    Averaging::ThroughHost
}
