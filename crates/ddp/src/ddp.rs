//! [`DistributedDataParallel`]: a Burn model replicated on every rank of a process group.

use std::sync::Arc;

use burn::module::Module;
use phalanx_pg::ProcessGroup;

use crate::adapter::burn::{
    param_infos, params_to_flat, set_params_from_flat, GradTable, Gradients, GradientsParams,
};
use crate::adapter::ParamInfo;
use crate::bucket::compute_bucket_assignment_by_size;
use crate::device_buckets::{choose_averaging, Averaging, DeviceReducer};
use crate::hook::CommHook;
use crate::reducer::Reducer;
use crate::stats::CommStats;
use crate::verify::check_same_model;
use crate::{BucketMemory, DdpOptions, Error, Result};

/// PyTorch broadcasts module state at construction in buckets of 250 MiB.
const BROADCAST_BUCKET_BYTES: usize = 250 * 1024 * 1024;

/// A model replicated on every rank: construction makes the replicas identical, and
/// [`sync_gradients`](Self::sync_gradients) averages the gradients of each step so that they stay
/// identical after the optimizer step.
///
/// The training loop of one rank:
/// ```text
/// let grads = loss.backward();                 // this rank's batch
/// let grads = ddp.sync_gradients(grads)?;      // averaged over ranks, bucket by bucket
/// ddp.map_module(|m| optimizer.step(lr, m, grads));
/// ```
pub struct DistributedDataParallel<M: Module> {
    /// Always `Some` between calls; `None` only inside [`map_module`](Self::map_module).
    module: Option<M>,
    pg: Arc<ProcessGroup>,
    options: DdpOptions,
    infos: Vec<ParamInfo>,
    reducer: Reducer,
    /// `Some` when buckets stay on the parameters' device (Note [Device buckets]).
    device: Option<DeviceReducer>,
}

impl<M: Module> DistributedDataParallel<M> {
    /// Wraps `module`: checks that every rank built the same parameters (names and shapes, in
    /// canonical order; the error names the first differing parameter and rank), then broadcasts
    /// rank 0's parameter values. A collective: every rank of `pg` must call it.
    pub fn new(module: M, pg: Arc<ProcessGroup>, options: DdpOptions) -> Result<Self> {
        let infos = param_infos(&module);
        check_same_model(&pg, &infos)?;
        let module = if options.broadcast_params && pg.world_size() > 1 {
            broadcast_params(&pg, module, &infos)?
        } else {
            module
        };
        let sizes: Vec<usize> = infos.iter().map(|i| i.numel() * 4).collect();
        let caps = [
            options.first_bucket_bytes.min(options.bucket_cap_bytes),
            options.bucket_cap_bytes,
        ];
        let assignment = compute_bucket_assignment_by_size(&sizes, &caps);
        let numels: Vec<usize> = infos.iter().map(ParamInfo::numel).collect();
        let device = device_reducer(&pg, &module, &options, assignment.len())?;
        tracing::info!(
            rank = pg.rank(),
            params = infos.len(),
            buckets = assignment.len(),
            hook = options.comm_hook.name(),
            bucket_memory = match device.as_ref().map(DeviceReducer::averaging) {
                None => "host",
                Some(Averaging::InPlace) => "device (NCCL in place)",
                Some(Averaging::Pinned) => "device (allreduce through page-locked host memory)",
                Some(Averaging::ThroughHost) => "device (allreduce through the host)",
            },
            "DDP ready"
        );
        Ok(DistributedDataParallel {
            module: Some(module),
            pg,
            options,
            infos,
            reducer: Reducer::new(assignment, &numels),
            device,
        })
    }

    /// Whether gradient buckets stay on the parameters' device (Note [Device buckets]), and
    /// whether NCCL averages them in place there.
    pub fn buckets_on_device(&self) -> Option<bool> {
        self.device
            .as_ref()
            .map(|d| d.averaging() == Averaging::InPlace)
    }

    /// The wrapped model.
    pub fn module(&self) -> &M {
        self.module
            .as_ref()
            .expect("module is present outside map_module")
    }

    /// Unwraps the model.
    pub fn into_inner(self) -> M {
        self.module.expect("module is present outside map_module")
    }

    /// Replaces the model by `f(model)`: the optimizer step. `f` must not change the parameter
    /// list (names and shapes).
    pub fn map_module(&mut self, f: impl FnOnce(M) -> M) {
        let module = self
            .module
            .take()
            .expect("module is present outside map_module");
        self.module = Some(f(module));
    }

    /// The process group.
    pub fn process_group(&self) -> &Arc<ProcessGroup> {
        &self.pg
    }

    /// The options given at construction.
    pub fn options(&self) -> &DdpOptions {
        &self.options
    }

    /// Names and shapes of the parameters, in canonical order.
    pub fn param_infos(&self) -> &[ParamInfo] {
        &self.infos
    }

    /// The buckets, in launch order, as indices into [`param_infos`](Self::param_infos).
    pub fn bucket_assignment(&self) -> Vec<Vec<usize>> {
        self.reducer
            .buckets()
            .iter()
            .map(|b| b.params.clone())
            .collect()
    }

    /// Communication statistics so far.
    pub fn stats(&self) -> CommStats {
        self.reducer.stats
    }

    /// Averages this step's gradients over all ranks and returns them for the optimizer.
    ///
    /// Gradients are packed bucket by bucket in launch order; each bucket's hook starts as soon as
    /// it is packed, so packing the next bucket overlaps the previous one's communication. Then the
    /// buckets are awaited in order and unpacked. Gradients accumulated by [`no_sync`](Self::no_sync)
    /// steps are added first. A collective: every rank must call it for every synchronising step.
    pub fn sync_gradients(&mut self, mut grads: Gradients) -> Result<GradientsParams> {
        let table = GradTable::new(self.module());
        self.check_table(&table)?;
        let mut out = GradientsParams::new();
        if let Some(device) = &mut self.device {
            let (buckets, stats) = self.reducer.layout_and_stats();
            device.synchronize(
                &self.pg,
                &table,
                buckets,
                &mut grads,
                stats,
                |bucket, flat| register_slices(&table, bucket, flat, &mut out),
            )?;
            return Ok(out);
        }
        self.reducer.synchronize(
            &self.pg,
            self.options.comm_hook.as_ref(),
            |p, buf, add| table.grad_into(p, &mut grads, buf, add).map(drop),
            |bucket, buf| {
                for (p, range) in bucket.slots() {
                    table.register_grad(p, buf[range].to_vec(), &mut out);
                }
            },
        )?;
        Ok(out)
    }

    /// [`sync_gradients`](Self::sync_gradients) fused with the optimizer step: as soon as a
    /// bucket is averaged, `step(module, bucket_grads)` updates that bucket's parameters while the
    /// later buckets are still on the wire. `step` is called once per bucket with the gradients of
    /// that bucket only; an optimizer that treats parameters independently (SGD, momentum, weight
    /// decay, Adam) gives the same result as one step over all gradients. Not for optimizers that
    /// look at all gradients at once (gradient clipping by global norm): use `sync_gradients`.
    pub fn sync_and_step(
        &mut self,
        mut grads: Gradients,
        mut step: impl FnMut(M, GradientsParams) -> M,
    ) -> Result<()> {
        let table = GradTable::new(self.module());
        self.check_table(&table)?;
        let module = &mut self.module;
        if let Some(device) = &mut self.device {
            let (buckets, stats) = self.reducer.layout_and_stats();
            return device.synchronize(
                &self.pg,
                &table,
                buckets,
                &mut grads,
                stats,
                |bucket, flat| {
                    let mut params = GradientsParams::new();
                    register_slices(&table, bucket, flat, &mut params);
                    let _s = phalanx_core::trace::span("step", "optimizer");
                    let m = module.take().expect("module is present outside map_module");
                    *module = Some(step(m, params));
                },
            );
        }
        self.reducer.synchronize(
            &self.pg,
            self.options.comm_hook.as_ref(),
            |p, buf, add| table.grad_into(p, &mut grads, buf, add).map(drop),
            |bucket, buf| {
                let mut params = GradientsParams::new();
                let copy = phalanx_core::trace::span("copy-out", "optimizer");
                for (p, range) in bucket.slots() {
                    table.register_grad(p, buf[range].to_vec(), &mut params);
                }
                drop(copy);
                let _s = phalanx_core::trace::span("step", "optimizer");
                let m = module.take().expect("module is present outside map_module");
                *module = Some(step(m, params));
            },
        )
    }

    /// Gradient accumulation (PyTorch's `with ddp.no_sync():`): adds this step's gradients to a
    /// local accumulator without communication. The next [`sync_gradients`](Self::sync_gradients)
    /// averages the sum of all accumulated steps plus its own.
    pub fn no_sync(&mut self, mut grads: Gradients) -> Result<()> {
        let table = GradTable::new(self.module());
        self.check_table(&table)?;
        if let Some(device) = &mut self.device {
            device.accumulate(&table, self.reducer.buckets(), &mut grads);
            return Ok(());
        }
        self.reducer
            .accumulate(|p, buf, add| table.grad_into(p, &mut grads, buf, add).map(drop))
    }

    /// Whether `no_sync` gradients are waiting for the next synchronisation.
    pub fn has_accumulated(&self) -> bool {
        match &self.device {
            Some(device) => device.has_accumulated(),
            None => self.reducer.has_accumulated(),
        }
    }

    fn check_table(&self, table: &GradTable) -> Result<()> {
        if table.len() != self.infos.len() || table.infos().zip(&self.infos).any(|(a, b)| a != b) {
            return Err(Error::ModelChanged {
                rank: self.pg.rank(),
            });
        }
        Ok(())
    }
}

/// Device buckets (Note [Device buckets]) when the options ask for them, or when `Auto` finds
/// the model on a CUDA GPU; `None` for host buckets.
fn device_reducer<M: Module>(
    pg: &ProcessGroup,
    module: &M,
    options: &DdpOptions,
    buckets: usize,
) -> Result<Option<DeviceReducer>> {
    let default_hook = options.comm_hook.name() == CommHook::name(&crate::AllreduceHook);
    let table = GradTable::new(module);
    let averaging = match table.is_empty() {
        true => Averaging::ThroughHost,
        false => choose_averaging(pg, table.device(0)),
    };
    // On a GPU, device buckets beat host buckets either way (docs/gpu.md has the figures).
    let on_gpu = averaging != Averaging::ThroughHost;
    match options.bucket_memory {
        BucketMemory::Host => Ok(None),
        BucketMemory::Auto if on_gpu && default_hook => {
            Ok(Some(DeviceReducer::new(averaging, buckets)))
        }
        BucketMemory::Auto => Ok(None),
        BucketMemory::Device if !default_hook => Err(Error::Options {
            reason: format!(
                "device buckets take the default allreduce, but the communication hook is \
                 `{}`, which reduces host buffers: use BucketMemory::Host or ::Auto",
                options.comm_hook.name()
            ),
        }),
        BucketMemory::Device => Ok(Some(DeviceReducer::new(averaging, buckets))),
    }
}

/// Hands each parameter's slice of an averaged device bucket to the optimizer's gradients.
fn register_slices(
    table: &GradTable,
    bucket: &crate::reducer::BucketLayout,
    flat: burn::tensor::Tensor<1>,
    params: &mut GradientsParams,
) {
    // Slices of the bucket: a backend that slices by view (flex does) copies nothing here.
    let slicing = phalanx_core::trace::span("slice", "optimizer");
    for (p, range) in bucket.slots() {
        table.register_flat_grad(p, flat.clone().slice(range), params);
    }
    drop(slicing);
}

/// Broadcasts rank 0's parameter values to every rank, in buckets of 250 MiB.
fn broadcast_params<M: Module>(pg: &ProcessGroup, module: M, infos: &[ParamInfo]) -> Result<M> {
    let values = params_to_flat(&module)?;
    let mut flat: Vec<f32> = values.into_iter().flatten().collect();
    for chunk in flat.chunks_mut(BROADCAST_BUCKET_BYTES / 4) {
        pg.broadcast(chunk, 0).map_err(|source| Error::Setup {
            op: "broadcast(parameters)",
            source,
        })?;
    }
    let mut values = Vec::with_capacity(infos.len());
    let mut rest = flat.as_slice();
    for info in infos {
        let (head, tail) = rest.split_at(info.numel());
        values.push(head.to_vec());
        rest = tail;
    }
    set_params_from_flat(module, &values)
}
