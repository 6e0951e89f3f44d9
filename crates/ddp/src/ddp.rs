//! [`DistributedDataParallel`]: a Burn model replicated on every rank of a process group.
//!
//! Note [Uneven inputs]
//! PyTorch's `Join` context lets ranks with fewer batches finish early: a joined rank keeps
//! answering the others' collectives with zeros until all have joined. Here a rank out of data
//! calls [`DistributedDataParallel::join`]: each round it takes part in one synchronising step
//! with zero gradients and its active slot cleared (Note [Step header]), so the ranks still
//! training average over themselves only, and it applies the same averaged gradients and
//! buffers to its own replica, so that replicas stay bitwise identical at every step (PyTorch
//! instead rebroadcasts the model once at the end). A round in which no rank is active ends the
//! join on every rank at once: every rank calls `join` after its loop, the last one to run out
//! of data included.

use std::sync::Arc;

use burn::module::Module;
use phalanx_pg::ProcessGroup;

use crate::adapter::burn::{
    check_flat, flush_running_state, params_to_flat, set_params_from_flat, state_infos, GradTable,
    Gradients, GradientsParams, StepGradients,
};
use crate::adapter::device_buckets::{choose_averaging, Averaging, DeviceReducer};
use crate::adapter::{ParamInfo, StateInfo};
use crate::data_parallel::{DataParallel, HeldFloats, Local, ShardView, StepKind};
use crate::layout::{norm_squares_of_whole, Ownership};
use crate::reducer::{BucketLayout, Reducer};
use crate::stats::CommStats;
use crate::step_core::{self, StepCore};
use crate::step_header::Agreement;
use crate::verify::{broadcast_state, check_same_model};
use crate::{BucketBuffer, BucketMemory, DdpOptions, Error, Result};

/// A model replicated on every rank: construction makes the replicas identical, and
/// [`sync_gradients`](Self::sync_gradients) averages the gradients of each step so that they stay
/// identical after the optimizer step.
///
/// The training loop of one rank:
/// ```text
/// for batch in my_shard {
///     let grads = loss.backward();                 // this rank's batch
///     let grads = ddp.sync_gradients(grads)?;      // averaged over ranks, bucket by bucket
///     ddp.map_module(|m| optimizer.step(lr, m, grads));
/// }
/// ddp.join(|m, grads| optimizer.step(lr, m, grads))?; // uneven shards: wait for the others
/// ```
///
/// What travels (Note [Parameters, buffers and frozen] in `adapter/burn.rs`): trainable
/// parameters' gradients in buckets; buffers (BatchNorm's running statistics) after every step;
/// frozen parameters and int/bool tensors only at construction.
pub struct DistributedDataParallel<M: Module> {
    /// The module, the group, the tensors, the buffers, the `no_sync` used flags (Note [Step
    /// core]); every trainable parameter's gradient comes from the module's backward.
    core: StepCore<M>,
    options: DdpOptions,
    reducer: Reducer,
    /// `Some` when buckets stay on the parameters' device (Note [Device buckets]).
    device: Option<DeviceReducer>,
}

impl<M: Module> DistributedDataParallel<M> {
    /// Wraps `module`: checks that every rank built the same tensors (names, shapes and kinds:
    /// trainable, frozen, buffer, int, bool; in canonical order; the error names the first
    /// differing tensor and rank), then broadcasts rank 0's values of all of them. A collective:
    /// every rank of `pg` must call it.
    pub fn new(module: M, pg: Arc<ProcessGroup>, options: DdpOptions) -> Result<Self> {
        flush_running_state(&module);
        let states = state_infos(&module);
        check_same_model(&pg, &states)?;
        let module = if options.broadcast_params && pg.world_size() > 1 {
            broadcast_state(&pg, module, &states)?
        } else {
            module
        };
        let infos: Vec<ParamInfo> = GradTable::new(&module).infos().cloned().collect();
        let numels: Vec<usize> = infos.iter().map(ParamInfo::numel).collect();
        let buckets = options.bucket_count(&numels);
        let device = device_reducer(&pg, &module, &options, buckets)?;
        // Device buckets keep their gradients on the device already; views are a host saving.
        let views = options.gradient_as_bucket_view && device.is_none();
        let assignment = options.bucket_assignment(&numels, views);
        tracing::info!(
            rank = pg.rank(),
            params = infos.len(),
            tensors = states.len(),
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
        let grad_from_module = vec![true; infos.len()];
        let buffer_sync = options.buffer_sync;
        Ok(DistributedDataParallel {
            core: StepCore::new(module, pg, infos, states, grad_from_module, buffer_sync),
            options,
            reducer: Reducer::new(assignment, &numels, views),
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
        self.core.module()
    }

    /// Unwraps the model.
    pub fn into_inner(self) -> M {
        self.core.into_module()
    }

    /// Replaces the model by `f(model)`: the optimizer step. `f` must not change the parameter
    /// list (names, shapes, which parameters are trainable).
    pub fn map_module(&mut self, f: impl FnOnce(M) -> M) {
        self.core.map(f);
    }

    /// The process group.
    pub fn process_group(&self) -> &Arc<ProcessGroup> {
        self.core.pg()
    }

    /// The options given at construction.
    pub fn options(&self) -> &DdpOptions {
        &self.options
    }

    /// Names and shapes of the trainable parameters, in canonical order: what the buckets carry.
    pub fn param_infos(&self) -> &[ParamInfo] {
        self.core.infos()
    }

    /// Every tensor of the model with its kind: floats in canonical order (trainable, frozen,
    /// buffers interleaved as declared), then int and bool tensors.
    pub fn state_infos(&self) -> &[StateInfo] {
        self.core.states()
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

    /// Averages this step's gradients over all ranks and returns them for the optimizer, then
    /// synchronises the buffers (rank 0's values by default, [`BufferSync`](crate::BufferSync)).
    ///
    /// Gradients are packed bucket by bucket in launch order; each bucket's hook starts as soon as
    /// it is packed, so packing the next bucket overlaps the previous one's communication. Then the
    /// buckets are awaited in order and unpacked. Gradients accumulated by [`no_sync`](Self::no_sync)
    /// steps are added first. A parameter that no rank used gets no gradient (the optimizer leaves
    /// it alone); one that some ranks used is averaged with the others' zeros (Note [Step
    /// header]). A collective: every rank must call it for every synchronising step.
    pub fn sync_gradients(&mut self, grads: Gradients) -> Result<GradientsParams> {
        let table = GradTable::new(self.module());
        let mut out = GradientsParams::new();
        self.synchronize_inner(&table, Some(grads), |bucket, agreed| {
            bucket.register(&table, agreed, &mut out);
        })
        .and_then(|agreement| self.core.sync_buffers(&agreement))?;
        Ok(out)
    }

    /// [`sync_gradients`](Self::sync_gradients) followed by PyTorch's
    /// `clip_grad_norm_(max_norm)` on the averaged gradients: once every bucket has arrived,
    /// the global L2 norm over all trainable parameters is computed (the same value on every
    /// rank, since every rank holds the same averaged buckets; on host buckets summed in the
    /// order of Note [Global norm], so that the sharded modes compute bitwise the same norm)
    /// and every gradient is scaled by
    /// `min(1, max_norm / (norm + 1e-6))`. Returns the gradients and the norm before clipping.
    /// The norm spans all buckets, so the optimizer cannot start on a bucket before the last
    /// one arrives: [`sync_and_step`](Self::sync_and_step) has no clipping for that reason.
    /// With [`DdpOptions::model_norm`] (a model cut across ranks) the norm is the whole
    /// model's, summed over its pieces (Note [Norm across a cut model]), in another order.
    pub fn sync_gradients_clipped(
        &mut self,
        grads: Gradients,
        max_norm: f32,
    ) -> Result<(GradientsParams, f32)> {
        let table = GradTable::new(self.module());
        let mut held = Vec::new();
        let agreement = self.synchronize_inner(&table, Some(grads), |bucket, _| {
            held.push(match bucket {
                AveragedBucket::Host(_, buf) => Held::Host(std::mem::take(buf)),
                AveragedBucket::Device(_, flat) => Held::Device(flat),
            })
        })?;
        self.core.sync_buffers(&agreement)?;
        let squares = match (&self.options.model_norm, held.iter().all(Held::is_host)) {
            (Some(norm), _) => norm.total(&self.norm_squares_by_param(&held))?,
            (None, true) => self.host_norm_squares(&held),
            (None, false) => held.iter().map(Held::sum_of_squares).sum(),
        };
        let norm = squares.sqrt() as f32;
        let coef = (max_norm / (norm + 1e-6)).min(1.0);
        let mut out = GradientsParams::new();
        for (layout, held) in self.reducer.buckets().iter().zip(held) {
            let bucket = match held {
                Held::Host(mut buf) => {
                    if coef < 1.0 {
                        buf.iter_mut().for_each(|g| *g *= coef);
                    }
                    AveragedBucket::Host(layout, &mut buf).register(&table, &agreement, &mut out);
                    continue;
                }
                Held::Device(flat) if coef < 1.0 => flat.mul_scalar(coef),
                Held::Device(flat) => flat,
            };
            AveragedBucket::Device(layout, bucket).register(&table, &agreement, &mut out);
        }
        Ok((out, norm))
    }

    /// Σ g² over host buckets in the order of Note [Global norm] (`layout.rs`), which a
    /// sharded run reproduces from its shards: parameter by parameter, the elements each rank
    /// would own, in DDP's segments of the buckets.
    fn host_norm_squares(&self, held: &[Held]) -> f64 {
        let buckets = self.reducer.buckets();
        let assignment: Vec<Vec<usize>> = buckets.iter().map(|b| b.params.clone()).collect();
        let rides =
            self.options.comm_hook.is_plain_average() && buckets.first().is_some_and(|b| !b.view);
        let world = self.core.pg().world_size();
        let header = self.core.infos().len() + world;
        let pads: Vec<usize> = (0..buckets.len())
            .map(|k| if k == 0 && rides { header } else { 0 })
            .collect();
        let numels: Vec<usize> = self.core.infos().iter().map(ParamInfo::numel).collect();
        let ownership = Ownership::from_buckets(&numels, &assignment, &pads, world);
        let mut at = vec![(0, 0..0); numels.len()];
        for (k, bucket) in buckets.iter().enumerate() {
            for (p, range) in bucket.slots() {
                at[p] = (k, range);
            }
        }
        norm_squares_of_whole(&ownership, |p| {
            let (k, range) = &at[p];
            match &held[*k] {
                Held::Host(buf) => &buf[range.clone()],
                Held::Device(_) => unreachable!("host buckets only"),
            }
        })
    }

    /// The sum of squares of each trainable parameter's averaged gradient, in canonical order
    /// (what [`ModelNorm`](crate::ModelNorm) completes into a cut model's norm).
    fn norm_squares_by_param(&self, held: &[Held]) -> Vec<f64> {
        let mut squares = vec![0f64; self.core.infos().len()];
        for (bucket, held) in self.reducer.buckets().iter().zip(held) {
            for (p, range) in bucket.slots() {
                squares[p] = match held {
                    Held::Host(buf) => crate::layout::sum_of_squares(&buf[range]),
                    Held::Device(flat) => f64::from(
                        flat.clone()
                            .slice(range)
                            .powi_scalar(2)
                            .sum()
                            .into_scalar::<f32>(),
                    ),
                };
            }
        }
        squares
    }

    /// [`sync_gradients`](Self::sync_gradients) fused with the optimizer step: as soon as a
    /// bucket is averaged, `step(module, bucket_grads)` updates that bucket's parameters while the
    /// later buckets are still on the wire. `step` is called once per bucket with the gradients of
    /// that bucket only; an optimizer that treats parameters independently (SGD, momentum, weight
    /// decay, Adam) gives the same result as one step over all gradients. Not for optimizers that
    /// look at all gradients at once (gradient clipping by global norm): use `sync_gradients`.
    pub fn sync_and_step(
        &mut self,
        grads: Gradients,
        step: impl FnMut(M, GradientsParams) -> M,
    ) -> Result<()> {
        self.synchronize_and_step(Some(grads), step).map(drop)
    }

    /// Gradient accumulation (PyTorch's `with ddp.no_sync():`): adds this step's gradients to a
    /// local accumulator without communication. The next [`sync_gradients`](Self::sync_gradients)
    /// averages the sum of all accumulated steps plus its own.
    pub fn no_sync(&mut self, mut grads: Gradients) -> Result<()> {
        let table = GradTable::new(self.module());
        self.check_table(&table)?;
        self.core.accumulate_used(&table, &grads);
        if let Some(device) = &mut self.device {
            device.accumulate(&table, self.reducer.buckets(), &mut grads);
            return Ok(());
        }
        self.reducer.accumulate(&mut StepGradients {
            table: &table,
            grads: Some(&mut grads),
        })
    }

    /// Whether `no_sync` gradients are waiting for the next synchronisation.
    pub fn has_accumulated(&self) -> bool {
        match &self.device {
            Some(device) => device.has_accumulated(),
            None => self.reducer.has_accumulated(),
        }
    }

    /// Uneven inputs (PyTorch's `Join`; Note [Uneven inputs]): called by a rank that has run out
    /// of batches, after its last step. Until every rank has called it, this rank answers the
    /// others' synchronising steps with zero gradients (they average over the ranks that still
    /// have data) and applies the same averaged gradients with `step`, and the same buffers, to
    /// its own replica, so that replicas stay identical. Returns the number of steps it shadowed.
    /// A collective: every rank must call it once after its loop, with an optimizer in the same
    /// state as the other ranks' (the one it trained with).
    pub fn join(&mut self, mut step: impl FnMut(M, GradientsParams) -> M) -> Result<usize> {
        let (rank, accumulated) = (self.core.pg().rank(), self.has_accumulated());
        step_core::join(rank, accumulated, || {
            self.synchronize_and_step(None, &mut step)
        })
    }

    /// One synchronising step that hands each averaged bucket to the optimizer as it arrives;
    /// without `grads`, a joined rank's round.
    fn synchronize_and_step(
        &mut self,
        grads: Option<Gradients>,
        mut step: impl FnMut(M, GradientsParams) -> M,
    ) -> Result<Agreement> {
        let table = GradTable::new(self.module());
        let mut module = Some(self.core.take());
        let result = self.synchronize_inner(&table, grads, |bucket, agreed| {
            let mut params = GradientsParams::new();
            if bucket.register(&table, agreed, &mut params) == 0 {
                return;
            }
            let _s = phalanx_core::trace::span("step", "optimizer");
            let m = module.take().expect("module is present between buckets");
            module = Some(step(m, params));
        });
        self.core
            .put(module.expect("module is present between buckets"));
        let agreement = result?;
        self.core.sync_buffers(&agreement)?;
        Ok(agreement)
    }

    /// The gradient part of a synchronising step, on host or device buckets: `drain` receives
    /// each averaged bucket, with what the ranks agreed on (Note [Step header]).
    fn synchronize_inner(
        &mut self,
        table: &GradTable,
        mut grads: Option<Gradients>,
        mut drain: impl FnMut(AveragedBucket<'_>, &Agreement),
    ) -> Result<Agreement> {
        let _warm = crate::compute_pool::keep_warm();
        self.check_table(table)?;
        let header = self.core.header(table, grads.as_ref(), &[]);
        let params = table.len();
        if let Some(device) = &mut self.device {
            let (buckets, stats) = self.reducer.layout_and_stats();
            return device.synchronize(
                self.core.pg(),
                table,
                buckets,
                grads.as_mut(),
                header,
                stats,
                |layout, flat, agreed| {
                    let flat = match agreed.rescale() {
                        Some(s) => flat.mul_scalar(s),
                        None => flat,
                    };
                    drain(AveragedBucket::Device(layout, flat), agreed)
                },
            );
        }
        self.reducer.synchronize(
            self.core.pg(),
            self.options.comm_hook.as_ref(),
            header,
            params,
            &mut StepGradients {
                table,
                grads: grads.as_mut(),
            },
            |layout, buf, agreed| {
                if let Some(s) = agreed.rescale() {
                    buf.iter_mut().for_each(|g| *g *= s);
                }
                drain(AveragedBucket::Host(layout, buf), agreed)
            },
        )
    }

    /// The module's parameters are still the ones the engine wrapped.
    fn check_table(&self, table: &GradTable) -> Result<()> {
        if self.core.table_changed(table) {
            return Err(Error::ModelChanged {
                rank: self.core.pg().rank(),
            });
        }
        Ok(())
    }
}

/// DDP keeps everything on every rank: the optimizer steps the whole module.
impl<M: Module> DataParallel<M> for DistributedDataParallel<M> {
    type Params = M;

    fn process_group(&self) -> &Arc<ProcessGroup> {
        self.core.pg()
    }

    fn param_infos(&self) -> &[ParamInfo] {
        self.core.infos()
    }

    fn state_infos(&self) -> &[StateInfo] {
        self.core.states()
    }

    fn stats(&self) -> CommStats {
        self.reducer.stats
    }

    fn module(&self) -> &M {
        self.core.module()
    }

    fn unshard(&mut self) -> Result<&M> {
        Ok(self.core.module())
    }

    fn reshard(&mut self) {}

    fn full_params(&mut self) -> Result<Vec<Vec<f32>>> {
        params_to_flat(self.core.module())
    }

    fn set_full_params(&mut self, values: &[Vec<f32>]) -> Result<()> {
        check_flat(self.core.module(), values)?;
        self.core
            .map(|m| set_params_from_flat(m, values).expect("checked: one value per tensor"));
        Ok(())
    }

    fn step(
        &mut self,
        grads: Gradients,
        kind: StepKind,
        mut step: impl FnMut(M, GradientsParams) -> M,
    ) -> Result<Option<f32>> {
        match kind {
            StepKind::Fused => self.sync_and_step(grads, step).map(|()| None),
            StepKind::Unfused => {
                let averaged = self.sync_gradients(grads)?;
                self.map_module(|m| step(m, averaged));
                Ok(None)
            }
            StepKind::Clipped(max_norm) => {
                let (averaged, norm) = self.sync_gradients_clipped(grads, max_norm)?;
                self.map_module(|m| step(m, averaged));
                Ok(Some(norm))
            }
        }
    }

    fn no_sync(&mut self, grads: Gradients) -> Result<()> {
        DistributedDataParallel::no_sync(self, grads)
    }

    fn has_accumulated(&self) -> bool {
        DistributedDataParallel::has_accumulated(self)
    }

    fn join(&mut self, step: impl FnMut(M, GradientsParams) -> M) -> Result<usize> {
        DistributedDataParallel::join(self, step)
    }

    fn held_floats(&self) -> HeldFloats {
        let whole = self.core.infos().iter().map(ParamInfo::numel).sum();
        HeldFloats {
            params: whole,
            grads: whole,
        }
    }

    fn shard_view(&self) -> Option<ShardView<'_>> {
        None
    }

    fn into_inner(self) -> Result<M> {
        Ok(self.core.into_module())
    }

    fn into_local(self) -> Result<Local<M>> {
        Ok(Local::Whole(self.core.into_module()))
    }
}

/// One averaged bucket, in host memory or on the parameters' device.
// Built and consumed once per bucket, never stored: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
enum AveragedBucket<'a> {
    /// A view bucket's buffer is taken (Note [Gradient as bucket view]); a packed one's copied.
    Host(&'a BucketLayout, &'a mut BucketBuffer),
    Device(&'a BucketLayout, burn::tensor::Tensor<1>),
}

impl AveragedBucket<'_> {
    /// Registers the gradients of the bucket's parameters that some rank used; returns how many.
    fn register(
        self,
        table: &GradTable,
        agreed: &Agreement,
        params: &mut GradientsParams,
    ) -> usize {
        let mut registered = 0;
        match self {
            AveragedBucket::Host(layout, buf) if layout.view => {
                let p = layout.params[0];
                if agreed.is_used(p) {
                    table.register_bucket(p, std::mem::take(buf), params);
                    registered += 1;
                }
            }
            AveragedBucket::Host(layout, buf) => {
                let _copy = phalanx_core::trace::span("copy-out", "optimizer");
                for (p, range) in layout.slots().filter(|(p, _)| agreed.is_used(*p)) {
                    table.register_grad(p, buf[range].to_vec(), params);
                    registered += 1;
                }
            }
            AveragedBucket::Device(layout, flat) => {
                // Slices of the bucket: a backend that slices by view (flex does) copies nothing.
                let _slicing = phalanx_core::trace::span("slice", "optimizer");
                for (p, range) in layout.slots().filter(|(p, _)| agreed.is_used(*p)) {
                    table.register_flat_grad(p, flat.clone().slice(range), params);
                    registered += 1;
                }
            }
        }
        registered
    }
}

/// An averaged bucket kept until every bucket has arrived (gradient clipping).
// One per bucket, for one step: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
enum Held {
    Host(BucketBuffer),
    Device(burn::tensor::Tensor<1>),
}

impl Held {
    fn is_host(&self) -> bool {
        matches!(self, Held::Host(_))
    }

    fn sum_of_squares(&self) -> f64 {
        match self {
            Held::Host(buf) => buf.iter().map(|&g| f64::from(g) * f64::from(g)).sum(),
            Held::Device(flat) => f64::from(flat.clone().powi_scalar(2).sum().into_scalar::<f32>()),
        }
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
    let default_hook = options.comm_hook.is_plain_average();
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
