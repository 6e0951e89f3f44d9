//! [`DataParallel`]: what [`DistributedDataParallel`](crate::DistributedDataParallel) and
//! [`FullyShardedDataParallel`](crate::fsdp::FullyShardedDataParallel) are to a training loop,
//! one trait, so that a loop (phalanx-train's trainer, a user's own) is written once over both.
//!
//! Note [The engine trait's name]
//! PyTorch has no common base for its two wrappers; what they share is the suffix of their
//! names: Distributed*DataParallel* and FullySharded*DataParallel* are both data parallelism,
//! each rank training on its own batches and the gradients averaged over the ranks, which
//! differ in how much of the training state each rank keeps. The trait takes that shared name.
//! It is not `torch.nn.DataParallel`, the single-process multi-GPU wrapper PyTorch deprecates:
//! that one has no Rust counterpart to be confused with. The optimizer steps what the engine
//! keeps ([`DataParallel::Params`]): the whole module under DDP, this rank's pieces
//! ([`ShardParams`]) under FSDP; with a closure from `Params` to `Params`, the same optimizer
//! code drives both. Tensor and pipeline parallelism split the model, not the data: they are
//! the mesh's other dimensions (`phalanx_pg::Mesh`), and a data-parallel engine runs on the
//! mesh's data-parallel group.
//!
//! ```
//! use std::sync::Arc;
//! use burn::module::Module;
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::SgdConfig;
//! use burn::tensor::{Device, Distribution, Tensor};
//! use phalanx_ddp::adapter::burn::set_params_from_flat;
//! use phalanx_ddp::fsdp::{FsdpOptions, FullyShardedDataParallel, Sharding};
//! use phalanx_ddp::{DataParallel, DdpOptions, DistributedDataParallel, StepKind};
//!
//! #[derive(Module, Debug)]
//! struct Net { fc: Linear }
//!
//! /// One loop for any engine: the optimizer steps whatever the engine keeps.
//! fn train<E: DataParallel<Net>>(engine: &mut E, device: &Device) -> String {
//!     let mut optim = SgdConfig::new().init();
//!     for _ in 0..3 {
//!         let x = Tensor::<2>::ones([8, 4], device);
//!         let grads = engine.unshard().unwrap().fc.forward(x).powf_scalar(2.0).mean().backward();
//!         engine.step(grads, StepKind::Fused, |p, g| optim.step(0.1, p, g)).unwrap();
//!     }
//!     format!("{:?}", engine.full_params().unwrap())
//! }
//!
//! let digests = phalanx_testing::spawn_ranks(2, |pg| {
//!     let pg = Arc::new(pg);
//!     let device = Device::flex().autodiff();
//!     let net = || Net { fc: LinearConfig::new(4, 2).init(&device) };
//!     let mut ddp = DistributedDataParallel::new(net(), pg.clone(), DdpOptions::default()).unwrap();
//!     let options = FsdpOptions::new(Sharding::Full);
//!     let mut fsdp = FullyShardedDataParallel::new(net(), pg, options).unwrap();
//!     // Rank 0's initial values in both: the same training, bitwise.
//!     let fsdp_start = fsdp.full_params().unwrap();
//!     ddp.map_module(|m| set_params_from_flat(m, &fsdp_start).unwrap());
//!     (train(&mut ddp, &device), train(&mut fsdp, &device))
//! });
//! assert_eq!(digests[0].0, digests[0].1);
//! assert_eq!(digests[0], digests[1]);
//! ```

use std::ops::Range;
use std::sync::Arc;

use burn::module::Module;
use phalanx_pg::ProcessGroup;

use crate::adapter::burn::{Gradients, GradientsParams};
use crate::adapter::shard::ShardParams;
use crate::adapter::{ParamInfo, StateInfo};
use crate::fsdp::LocalShard;
use crate::stats::CommStats;
use crate::Result;

/// How a synchronising step averages and applies its gradients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepKind {
    /// Each bucket stepped as soon as it is averaged, while later ones are on the wire.
    Fused,
    /// Every bucket averaged before any element is stepped: a step whose collectives fail
    /// leaves the parameters and the optimizer state as they were (what fault tolerance
    /// needs). Bitwise [`Fused`](StepKind::Fused)'s result.
    Unfused,
    /// PyTorch's `clip_grad_norm_(max_norm)` on the averaged gradients first (the norm spans
    /// every bucket, so nothing is stepped before the last one arrives).
    Clipped(f32),
}

/// What a rank holds of the training state between steps, in floats (ZeRO's accounting:
/// what each engine shards).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldFloats {
    /// Parameters: the module's whole ones (none that are sharded under `full`) and this
    /// rank's pieces.
    pub params: usize,
    /// The averaged gradients a step holds: whole, or this rank's pieces when the engine
    /// shards gradients.
    pub grads: usize,
}

/// What a rank holds of its model, read without a collective (after a failure of the group,
/// when none can run).
#[derive(Debug)]
pub enum Local<M> {
    /// The whole model (DDP: every rank holds all of it).
    Whole(M),
    /// The module and this rank's pieces of the sharded parameters.
    Shard(LocalShard<M>),
}

/// Where a sharding engine keeps the trainable parameters (Note [Shard layout] in
/// `layout.rs`): what its optimizer's state covers and what a sharded checkpoint holds.
#[derive(Debug, Clone)]
pub struct ShardView<'a> {
    /// The pieces this rank steps: its trainable parameter (an index into
    /// [`DataParallel::param_infos`]) and the elements of it the piece holds.
    pub pieces: &'a [(usize, Range<usize>)],
    /// Each trainable parameter's position among the model's float tensors (canonical order,
    /// buffers and frozen parameters included). Its pieces' parameter id is that plus one:
    /// the stable id (Note [Stable parameter ids] in phalanx-train).
    pub float_positions: &'a [usize],
    /// The pieces themselves, which the optimizer steps.
    pub shard: ShardParams,
    /// Whether this rank's pieces go into a sharded checkpoint (under `hybrid` the first
    /// shard group's ranks write; the others hold the same values).
    pub saves_pieces: bool,
    /// Per trainable parameter, the elements each rank of the whole group writes to a
    /// sharded checkpoint.
    pub saved_ranges: Vec<Vec<Range<usize>>>,
    /// The sharding's name (`--sharding`), which a sharded checkpoint records.
    pub sharding: &'static str,
}

/// A model trained data-parallel over a process group: the operations a training loop needs,
/// whatever the engine keeps on each rank (Note [The engine trait's name]).
///
/// Every method that says "a collective" must be called by every rank of the group, in the
/// same order.
pub trait DataParallel<M: Module>: Sized {
    /// What the optimizer steps: the module under DDP, this rank's pieces under FSDP.
    type Params: Module;

    /// The whole data-parallel group.
    fn process_group(&self) -> &Arc<ProcessGroup>;

    /// Names and shapes of the trainable parameters, in canonical order.
    fn param_infos(&self) -> &[ParamInfo];

    /// Every tensor of the model with its kind.
    fn state_infos(&self) -> &[StateInfo];

    /// Communication statistics so far.
    fn stats(&self) -> CommStats;

    /// The wrapped module as it is now: where the engine shards the parameters, its sharded
    /// tensors are empty but between [`unshard`](Self::unshard) and the next step.
    fn module(&self) -> &M;

    /// The module with its parameters whole, for a forward pass or evaluation: gathered
    /// first where the engine shards them (a collective then), as is otherwise.
    fn unshard(&mut self) -> Result<&M>;

    /// Frees gathered parameters again (after an evaluation); nothing where the engine keeps
    /// them whole.
    fn reshard(&mut self);

    /// The value of every float tensor of the model in canonical order, the trainable ones
    /// whole (a collective where they are sharded): for a digest or an export.
    fn full_params(&mut self) -> Result<Vec<Vec<f32>>>;

    /// Replaces the value of every float tensor of the model on this rank by `values` (whole
    /// tensors in canonical order, as [`full_params`](Self::full_params) returns them), between
    /// steps and without a collective: every rank of the group must be given the same values.
    /// What an outer optimizer does at a sync (Note [Outer sync] in `outer/`). The optimizer's
    /// state is left as it is.
    fn set_full_params(&mut self, values: &[Vec<f32>]) -> Result<()>;

    /// Hands `f` what [`full_params`](Self::full_params) returns, tensor by tensor in canonical
    /// order: an engine that shards the parameters gathers them a block at a time, so the
    /// caller (a digest, an export) never holds the whole model (a collective then).
    fn for_each_full_param(&mut self, f: &mut dyn FnMut(&[f32])) -> Result<()> {
        for values in self.full_params()? {
            f(&values);
        }
        Ok(())
    }

    /// One synchronising step: averages `grads` over the ranks (with the gradients of the
    /// `no_sync` steps before it) and hands them to `step` with what the engine keeps,
    /// as `kind` says. `step` is called once per bucket (its gradients only) under
    /// [`StepKind::Fused`], once otherwise. Returns the norm before clipping under
    /// [`StepKind::Clipped`]. A collective.
    fn step(
        &mut self,
        grads: Gradients,
        kind: StepKind,
        step: impl FnMut(Self::Params, GradientsParams) -> Self::Params,
    ) -> Result<Option<f32>>;

    /// Gradient accumulation (PyTorch's `no_sync`): keeps `grads` locally, no communication.
    fn no_sync(&mut self, grads: Gradients) -> Result<()>;

    /// FSDP2's `set_requires_gradient_sync`: whether blocks that reduce their gradients during
    /// the backward (fully sharded units) do so, or add them up until the next
    /// [`step`](Self::step), which reduces the sums. Nothing to do for an engine that averages
    /// after the backward (the default).
    fn set_requires_gradient_sync(&mut self, _yes: bool) {}

    /// FSDP2's `set_reshard_after_backward`: with `false`, blocks that gather their
    /// parameters for their own passes keep them gathered until the step ends (a pipeline's
    /// microbatches: Note [Microbatched units] in `fsdp/fully_sharded/mod.rs`). Nothing to do
    /// for an engine that holds its parameters whole (the default).
    fn set_reshard_after_backward(&mut self, _yes: bool) {}

    /// Whether `no_sync` gradients are waiting for the next synchronising step.
    fn has_accumulated(&self) -> bool;

    /// Uneven inputs (PyTorch's `Join`): called by a rank out of batches; it answers the
    /// others' steps until every rank has called it. Returns the steps it shadowed. A
    /// collective.
    fn join(
        &mut self,
        step: impl FnMut(Self::Params, GradientsParams) -> Self::Params,
    ) -> Result<usize>;

    /// What this rank keeps of the training state between steps, the optimizer's aside.
    fn held_floats(&self) -> HeldFloats;

    /// Where the trainable parameters are, when the engine shards them; `None` when every
    /// rank holds them whole (the optimizer state and a checkpoint are then whole too).
    fn shard_view(&self) -> Option<ShardView<'_>>;

    /// The model, whole (gathered where the engine shards it: a collective then).
    fn into_inner(self) -> Result<M>;

    /// What this rank holds, without a collective.
    fn into_local(self) -> Result<Local<M>>;
}
