//! [`FullyShardedDataParallel`]: a Burn model trained data-parallel with its optimizer state,
//! its gradients and its parameters sharded across the ranks (ZeRO stages 1–3, FSDP).
//!
//! Note [Sharded step]
//! A synchronising step runs DDP's reducer unchanged (the same buckets, packing, overlap,
//! `no_sync` accumulation and step header), with another communication hook under `grad` and
//! `full`: each bucket is reduce-scattered into its owners instead of all-reduced (Note
//! [Shard layout]). As each bucket arrives, this rank steps its own elements of it with the
//! user's optimizer on [`ShardParams`] (the elements are bitwise the ones DDP's allreduce
//! produces, and SGD, Adam and AdamW update each element from its own gradient and state
//! alone, so the updated elements are bitwise DDP's), and starts the all-gather of the
//! bucket's updated elements from their owners, which overlaps the next bucket's step. Under
//! `full` there is no all-gather at the end of the step: the parameters are freed and
//! gathered again before the next forward ([`unshard`](FullyShardedDataParallel::unshard)).
//! Buffers (BatchNorm's running statistics) and frozen parameters are not sharded: they are
//! whole on every rank and synchronised as under DDP.
//!
//! Note [Full sharding]
//! Under `full`, between steps a rank holds only its shard of each trainable parameter (in
//! [`ShardParams`], which is also what the optimizer steps); the module's trainable tensors
//! are empty. The model's blocks wrapped in [`FullyShard`](super::FullyShard) are *units*:
//! each gathers its parameters for its own forward and backward only and reduce-scatters its
//! gradients during the backward (Note [Unit operation] in `adapter/unit_op.rs`; their
//! gradients come to the step already in their owners). The rest of the model, the *root*
//! (all of it when nothing is wrapped), is gathered bucket by bucket by
//! [`unshard`](FullyShardedDataParallel::unshard) before the forward and freed by the step,
//! which reduce-scatters its gradients through the reducer as above. So the gathered
//! parameters alive at once are the root's plus the one or two blocks being computed (FSDP2
//! with the root and each block wrapped).
//!
//! Note [Microbatched units]
//! A pipeline stage (phalanx-train's `--pp`) runs each of its blocks once per microbatch in a
//! step, forward and backward, and a unit's backward may run only once per synchronising step
//! (its gradients go to their owners then). So under a pipeline the trainer calls
//! [`set_requires_gradient_sync(false)`](FullyShardedDataParallel::set_requires_gradient_sync)
//! and [`set_reshard_after_backward(false)`](FullyShardedDataParallel::set_reshard_after_backward)
//! once, as torchtitan does with FSDP2 under its pipeline schedules:
//! - every microbatch's backward adds the unit's gradients into its buffer of local sums, in
//!   the order the backwards ran (the order in which the stage sums the root's gradients, so
//!   the sums are bitwise the unsharded pipeline's), and the step starts the unit's one
//!   reduce-scatter of them (`UnitState::flush`) before it waits for any;
//! - the unit's first pass of the step gathers its parameters and keeps them until the step
//!   ends, so a step gathers each unit once, not once per microbatch and pass. The stage then
//!   holds its blocks' parameters whole while the step runs, as the unsharded pipeline does
//!   all the time; between steps it holds only its shard.
//!
//! So a stage under `full` sends per step what it sends without a pipeline: one all-gather
//! and one reduce-scatter of each unit's parameters.
//!
//! Note [Commit vote]
//! A held step ([`sync_and_step_unfused`](FullyShardedDataParallel::sync_and_step_unfused),
//! the clipped one: what fault tolerance runs) must leave every rank's shard either stepped or
//! as it was, the same on every rank: under `hybrid` a rank's pieces are also its replicas',
//! and a group re-formed after a failure needs one step's copy of each (Note [Regroup of
//! shards] in phalanx-train). The collectives of one step run in several groups (the shard
//! group's reduce-scatter, the replica group's allreduce), so a rank can die after some ranks
//! finished theirs and before others did. So once every gradient has arrived (and the
//! buffers are synchronised, and no block's gather failed) each rank enters one allreduce of
//! the whole group, the vote, and steps only when it completes. The vote completes on a rank
//! only after every rank entered it, that is after every rank holds its averaged gradients:
//! a rank whose vote fails keeps them ([`LocalShard::pending`]), and when the re-formed group
//! finds a rank one step ahead (its vote completed), the ranks one step behind that hold them
//! take that step ([`LocalShard::commit_pending`]); when none is ahead, nobody stepped.

mod groups;
mod local;
mod pieces;
mod root;

pub use local::{LocalShard, PendingStep};

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use burn::module::Module;
use phalanx_pg::{ProcessGroup, Work};

use super::collectives::{gather_unit, wait_gather, ReduceScatterHook};
use super::fully_shard::{find_units, UnitSlot};
use super::unit::{UnitState, Units};
use super::{FsdpOptions, Sharding};
use crate::adapter::burn::{
    floats_to_flat, flush_running_state, param_infos, params_to_flat, set_floats_by_name,
    set_floats_shaped, set_params_from_flat, state_infos, GradTable, Gradients, GradientsParams,
    Shaped, StepGradients,
};
use crate::adapter::shard::ShardParams;
use crate::adapter::unit_op;
use crate::adapter::{ParamInfo, StateInfo, StateKind};
use crate::data_parallel::{DataParallel, HeldFloats, Local, ShardView, StepKind};
use crate::hook::{AllreduceHook, CommHook};
use crate::layout::{fold_norm, Ownership, Unit};
use crate::reducer::Reducer;
use crate::stats::CommStats;
use crate::step_core::{self, StepCore};
use crate::step_header::Agreement;
use crate::verify::{broadcast_discrete, broadcast_float, check_same_model};
use crate::{Error, Result};
use groups::ShardGroups;
use local::{Apply, Prepared};
use pieces::Pieces;
use root::Root;

/// A model trained data-parallel with its training state sharded ([`Sharding`]): each rank
/// keeps the optimizer state (and under `grad`/`full` the gradients, under `full` the
/// parameters) of the elements it owns only, and steps them with Burn's own optimizer.
///
/// The loop of one rank:
/// ```text
/// for batch in my_shard {
///     fsdp.unshard()?;                              // full: gather the root's parameters
///     let grads = loss(fsdp.module(), batch).backward();
///     fsdp.sync_and_step(grads, |shard, g| optimizer.step(lr, shard, g))?;
/// }
/// ```
/// The optimizer steps [`ShardParams`], this rank's pieces of the parameters, not the model:
/// its state holds this rank's elements alone.
pub struct FullyShardedDataParallel<M: Module> {
    /// The module, the whole data-parallel group, the tensors, the buffers, the `no_sync` used
    /// flags (Note [Step core]); the gradients from the module's backward are the root's.
    core: StepCore<M>,
    /// The shard group and, under `hybrid`, the replica group.
    groups: ShardGroups,
    options: FsdpOptions,
    /// This rank's shard and where its pieces are.
    pieces: Pieces,
    /// The root's units and whether the module holds their parameters now.
    root: Root,
    /// The wrapped blocks (`full` only).
    blocks: Vec<Arc<UnitState>>,
    block_registry: Arc<Units>,
    /// Each trainable parameter's position among the model's float tensors.
    trainable: Vec<usize>,
    reducer: Reducer,
    hook: Arc<dyn CommHook>,
    /// A held step whose commit vote failed on this rank (Note [Commit vote]).
    prepared: Option<Box<Prepared>>,
}

impl<M: Module> FullyShardedDataParallel<M> {
    /// Wraps `module`: checks that every rank built the same tensors (as DDP does, naming the
    /// first differing tensor and rank), broadcasts rank 0's values, and keeps this rank's
    /// shard (Note [Shard layout]); under `full` the module's trainable tensors are freed and
    /// its [`FullyShard`](super::FullyShard) blocks become units (Note [Full sharding]). A
    /// collective: every rank of `pg` must call it.
    pub fn new(module: M, pg: Arc<ProcessGroup>, options: FsdpOptions) -> Result<Self> {
        options.check(&pg)?;
        flush_running_state(&module);
        let states = state_infos(&module);
        check_same_model(&pg, &states)?;
        let shard_groups = ShardGroups::new(&pg, &options)?;
        let shard_pg = &shard_groups.shard;
        let table = GradTable::new(&module);
        let infos: Vec<ParamInfo> = table.infos().cloned().collect();
        let numels: Vec<usize> = infos.iter().map(ParamInfo::numel).collect();
        // Ownership within the shard group (the whole group but under `hybrid`).
        let (rank, world) = (shard_pg.rank(), shard_pg.world_size());
        let views = options.ddp.gradient_as_bucket_view;
        let assignment = options.ddp.bucket_assignment(&numels, views);
        // Where DDP's step header rides (Note [Step header]) moves the segments of its first
        // bucket, and so the owners (Note [Shard layout]).
        let rides = assignment.first().is_some_and(|b| !(views && b.len() == 1));
        let pads: Vec<usize> = (0..assignment.len())
            .map(|k| match k == 0 && rides {
                true => infos.len() + world,
                false => 0,
            })
            .collect();
        let ownership = Arc::new(Ownership::from_buckets(&numels, &assignment, &pads, world));
        // Which trainable parameters the wrapped blocks hold (`full` only).
        let (slots, nested) = find_units(&module);
        if nested {
            return Err(Error::Options {
                reason: "a FullyShard block inside another FullyShard block: wrap each block \
                         once"
                    .to_string(),
            });
        }
        let slots = match options.sharding.shards_parameters() {
            true => slots,
            false => vec![None; slots.len()],
        };
        let trainable = trainable_positions(&states);
        let mut groups: Vec<(UnitSlot, Vec<usize>)> = Vec::new();
        for (p, &float) in trainable.iter().enumerate() {
            let Some(slot) = &slots[float] else { continue };
            match groups.iter_mut().find(|(s, _)| s.same(slot)) {
                Some((_, params)) => params.push(p),
                None => groups.push((slot.clone(), vec![p])),
            }
        }
        if !groups.is_empty() && !table.is_empty() && !unit_op::supports(table.device(0)) {
            return Err(Error::Options {
                reason: format!(
                    "--sharding {} with FullyShard blocks runs them on Burn's CPU backend \
                     (flex) only, and this model is on {:?}: use --device cpu, or a sharding \
                     mode that keeps parameters whole (optimizer, grad)",
                    options.sharding,
                    table.device(0)
                ),
            });
        }
        let mut is_root = vec![true; infos.len()];
        for (_, params) in &groups {
            for &p in params {
                is_root[p] = false;
            }
        }
        // The root's buckets: DDP's, without the blocks' parameters.
        let root_assignment: Vec<Vec<usize>> = assignment
            .iter()
            .map(|b| {
                b.iter()
                    .copied()
                    .filter(|&p| is_root[p])
                    .collect::<Vec<_>>()
            })
            .filter(|b| !b.is_empty())
            .collect();
        let units: Vec<Unit> = root_assignment
            .iter()
            .map(|b| Unit::new(b.clone(), &ownership))
            .collect();
        let block_units: Vec<Unit> = groups
            .iter()
            .map(|(_, params)| Unit::new(params.clone(), &ownership))
            .collect();
        let hook: Arc<dyn CommHook> = match options.sharding {
            Sharding::Optimizer => Arc::new(AllreduceHook),
            _ => Arc::new(ReduceScatterHook::new(
                &units,
                shard_pg.clone(),
                shard_groups.replica.clone(),
            )),
        };
        // Rank 0's values, tensor by tensor (no second copy of the model): this rank keeps
        // its piece of each trainable one and, unless the parameters are sharded, the whole.
        let device = match table.is_empty() {
            true => burn::tensor::Device::default(),
            false => table.device(0).clone(),
        };
        drop(table);
        let broadcast = options.ddp.broadcast_params && pg.world_size() > 1;
        let free = options.sharding.shards_parameters();
        let mut module = module;
        let mut owned: Vec<Vec<f32>> = vec![Vec::new(); infos.len()];
        let float_names: Vec<&StateInfo> = states.iter().filter(|s| s.kind.is_float()).collect();
        let mut next_trainable = 0;
        for (k, st) in float_names.iter().enumerate() {
            let p = (st.kind == StateKind::Trainable).then(|| {
                next_trainable += 1;
                next_trainable - 1
            });
            if p.is_none() && !broadcast {
                continue;
            }
            let mut values = floats_to_flat(&module, &[k])?.remove(0);
            if broadcast {
                broadcast_float(&pg, &mut values)?;
            }
            if let Some(p) = p {
                owned[p] = values[ownership.range(p, rank)].to_vec();
            }
            let name = st.info.name.clone();
            module = match (p.is_some() && free, broadcast) {
                (true, _) => set_floats_shaped(module, HashMap::from([(name, (&[][..], &[][..]))])),
                (false, true) => set_floats_by_name(module, HashMap::from([(name, &values[..])])),
                (false, false) => module,
            };
        }
        let module = match broadcast {
            true => broadcast_discrete(&pg, module, &states)?,
            false => module,
        };
        // This rank's pieces, unit by unit: the root's, then the blocks'.
        let units_of_rank = units.iter().chain(&block_units);
        let pieces = Pieces::new(
            units_of_rank,
            ownership.clone(),
            rank,
            owned,
            &trainable,
            &device,
        );
        let registry = Units::new();
        let blocks: Vec<Arc<UnitState>> = groups
            .iter()
            .zip(block_units)
            .enumerate()
            .map(|(k, ((slot, params), unit))| {
                let shapes = params.iter().map(|&p| infos[p].shape.clone()).collect();
                // The block's float tensors, and which of them are these parameters.
                let floats = states.iter().filter(|s| s.kind.is_float());
                let trainable_in_block = slots
                    .iter()
                    .zip(floats)
                    .filter(|(s, _)| s.as_ref().is_some_and(|s| s.same(slot)))
                    .map(|(_, st)| st.kind == StateKind::Trainable)
                    .collect();
                let state = UnitState::new(
                    k,
                    shard_pg.clone(),
                    ownership.clone(),
                    unit,
                    shapes,
                    trainable_in_block,
                    pieces.shared().clone(),
                    pieces.piece_of().clone(),
                    options.reshard_after_forward,
                    registry.clone(),
                );
                slot.set(Some(state.clone()));
                state
            })
            .collect();
        tracing::info!(
            rank,
            sharding = options.sharding.name(),
            params = infos.len(),
            buckets = units.len(),
            blocks = blocks.len(),
            owned = ownership.owned_by(rank),
            total = numels.iter().sum::<usize>(),
            "FSDP ready"
        );
        let buffer_sync = options.ddp.buffer_sync;
        let fsdp = FullyShardedDataParallel {
            core: StepCore::new(module, pg, infos, states, is_root, buffer_sync),
            groups: shard_groups,
            options,
            pieces,
            // Under `full` every trainable tensor was freed above.
            root: Root::new(units, free),
            blocks,
            block_registry: registry,
            trainable,
            reducer: Reducer::new(root_assignment, &numels, views),
            hook,
            prepared: None,
        };
        Ok(fsdp)
    }

    /// The wrapped model. Under `full` its trainable tensors are empty, but the root's
    /// between [`unshard`](Self::unshard) and the next step.
    pub fn module(&self) -> &M {
        self.core.module()
    }

    /// This rank's shard of the trainable parameters: what the optimizer steps.
    pub fn shard(&self) -> ShardParams {
        self.pieces.shard()
    }

    /// Each piece of the shard: its trainable parameter (an index into
    /// [`param_infos`](Self::param_infos)) and the elements of it the piece holds.
    pub fn piece_params(&self) -> &[(usize, Range<usize>)] {
        self.pieces.piece_params()
    }

    /// Trainable parameter `p`'s position among the model's float tensors (canonical order,
    /// buffers and frozen parameters included). Its pieces' [`ParamId`](burn::module::ParamId) is
    /// that plus one: the stable id (Note [Stable parameter ids] in phalanx-train).
    pub fn float_position(&self, p: usize) -> usize {
        self.trainable[p]
    }

    /// The ranks among which the elements are sharded (the whole group but under `hybrid`).
    pub fn shard_group(&self) -> &Arc<ProcessGroup> {
        &self.groups.shard
    }

    /// The elements of trainable parameter `p` each rank of the whole group writes to a
    /// sharded checkpoint: its own, but under `hybrid` only the first shard group's ranks
    /// write (the others hold the same values) and the rest nothing.
    pub fn saved_ranges(&self, p: usize) -> Vec<Range<usize>> {
        let first = self.groups.shard.world_size();
        (0..self.core.pg().world_size())
            .map(|w| match w < first {
                true => self.pieces.ownership().range(p, w),
                false => 0..0,
            })
            .collect()
    }

    /// Whether this rank's pieces go into a sharded checkpoint (see
    /// [`saved_ranges`](Self::saved_ranges)).
    pub fn saves_pieces(&self) -> bool {
        self.core.pg().rank() < self.groups.shard.world_size()
    }

    /// Who owns which elements (Note [Shard layout]).
    pub fn ownership(&self) -> &Ownership {
        self.pieces.ownership()
    }

    /// The options given at construction.
    pub fn options(&self) -> &FsdpOptions {
        &self.options
    }

    /// The process group.
    pub fn process_group(&self) -> &Arc<ProcessGroup> {
        self.core.pg()
    }

    /// Names and shapes of the trainable parameters, in canonical order.
    pub fn param_infos(&self) -> &[ParamInfo] {
        self.core.infos()
    }

    /// Every tensor of the model with its kind.
    pub fn state_infos(&self) -> &[StateInfo] {
        self.core.states()
    }

    /// Communication statistics so far.
    pub fn stats(&self) -> CommStats {
        self.reducer.stats
    }

    /// How many [`FullyShard`](super::FullyShard) blocks are units (`full` only).
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Whether the module holds the root's whole parameters now (always, but under `full`).
    pub fn is_unsharded(&self) -> bool {
        self.root.is_unsharded()
    }

    /// FSDP2's `set_requires_gradient_sync`: under `full` with [`FullyShard`](super::FullyShard)
    /// blocks, call it with `false` before the backward of each [`no_sync`](Self::no_sync)
    /// micro-step (the blocks reduce their gradients during the backward) and with `true`
    /// before the synchronising step's.
    pub fn set_requires_gradient_sync(&mut self, yes: bool) {
        self.block_registry.set_sync(yes);
    }

    /// FSDP2's `set_reshard_after_backward`: with `false`, each
    /// [`FullyShard`](super::FullyShard) block keeps the parameters its first pass of a step
    /// gathered until the step ends, for the step's other microbatches (Note [Microbatched
    /// units]); with `true` (the default) each pass gathers them.
    pub fn set_reshard_after_backward(&mut self, yes: bool) {
        self.block_registry.set_keep_gathered(!yes);
        if yes {
            self.free_block_gathers();
        }
    }

    /// Frees what the blocks keep gathered: their parameters are about to change, or an
    /// evaluation is over.
    fn free_block_gathers(&self) {
        for block in &self.blocks {
            block.free_gathered();
        }
    }

    /// Under `full`: all-gathers the root's trainable parameters into the module, bucket by
    /// bucket, for a forward pass (Note [Full sharding]); nothing to do otherwise, or when they
    /// are gathered already. A collective.
    pub fn unshard(&mut self) -> Result<()> {
        self.root
            .unshard(&mut self.core, &self.pieces, &self.groups.shard)
    }

    /// Under `full`: frees the module's root parameters (their values live in the shard).
    pub fn reshard(&mut self) {
        self.root.reshard(&mut self.core);
        self.free_block_gathers();
    }

    /// Every trainable parameter whole, by name (the blocks' gathered one by one under
    /// `full`): a collective under `full`.
    fn whole_params(&mut self) -> Result<HashMap<String, Shaped>> {
        let was = self.root.is_unsharded();
        self.unshard()?;
        let values = params_to_flat(self.module())?;
        let mut whole: HashMap<String, Shaped> = HashMap::new();
        for (p, info) in self.core.infos().iter().enumerate() {
            if self.core.grad_from_module()[p] {
                let v = values[self.trainable[p]].clone();
                whole.insert(info.name.clone(), (v, info.shape.clone()));
            }
        }
        for block in &self.blocks {
            let gathered = block.gather_now()?;
            for (&p, v) in block.unit.params().iter().zip(gathered) {
                whole.insert(self.core.infos()[p].name.clone(), v);
            }
        }
        if !was {
            self.reshard();
        }
        Ok(whole)
    }

    /// The whole model (gathered under `full`: a collective).
    pub fn into_inner(mut self) -> Result<M> {
        let whole = self.whole_params()?;
        let values = whole
            .iter()
            .map(|(name, (v, s))| (name.clone(), (v.as_slice(), s.as_slice())))
            .collect();
        let module = self.core.take();
        // The blocks hand back their parameters: the wrappers are plain blocks again.
        for block in &self.blocks {
            drop(block.take_gradients());
        }
        let module = set_floats_shaped(module, values);
        super::fully_shard::unshard_blocks(&module);
        Ok(module)
    }

    /// What this rank holds, without any collective (after a failure of the group, when no
    /// collective can run): the module (buffers, frozen and discrete tensors whole; the
    /// trainable ones whole, or empty where the parameters are sharded) and this rank's pieces
    /// of the trainable parameters. Fault tolerance re-forms the state of a new group from
    /// the pieces its ranks hold (Note [Regroup of shards] in phalanx-train).
    pub fn into_local(mut self) -> Result<LocalShard<M>> {
        let shard = self.shard();
        let pieces = self.pieces.values()?;
        let pending = self.prepared.take().map(|p| PendingStep {
            grads: self.piece_gradients(&p),
            shard: shard.clone(),
        });
        Ok(LocalShard {
            module: self.core.take(),
            pieces,
            infos: self.core.infos().to_vec(),
            pending,
        })
    }

    /// A prepared step's gradients, piece by piece (the pieces the step updates).
    fn piece_gradients(&self, prepared: &Prepared) -> Vec<(usize, Vec<f32>)> {
        let agreed = &prepared.agreement;
        prepared
            .held
            .iter()
            .flat_map(|(u, own)| self.pieces.gradients(self.unit(*u), own, agreed))
            .collect()
    }

    /// The value of every float tensor of the model, in canonical order, the trainable ones
    /// whole (gathered from their owners under `full`: a collective then).
    pub fn full_params(&mut self) -> Result<Vec<Vec<f32>>> {
        let mut values = Vec::new();
        self.for_each_full_param(&mut |v| values.push(v.to_vec()))?;
        Ok(values)
    }

    /// Replaces every float tensor of the model by `values`, in canonical order, the trainable
    /// ones whole (as [`full_params`](Self::full_params) gives them, the same on every rank
    /// of the group): each rank keeps its pieces of them and the module what it holds (under
    /// `full` its trainable tensors are empty). The optimizer's state, keyed by the pieces'
    /// ids, is kept. No collective.
    pub fn set_full_params(&mut self, values: &[Vec<f32>]) -> Result<()> {
        if self.root.is_unsharded() {
            self.reshard();
        }
        self.free_block_gathers();
        let held = params_to_flat(self.module())?;
        let floats: Vec<usize> = self
            .core
            .states()
            .iter()
            .filter(|s| s.kind.is_float())
            .map(|s| s.info.numel())
            .collect();
        if values.len() != floats.len() || values.iter().zip(&floats).any(|(v, n)| v.len() != *n) {
            return Err(Error::Unsupported {
                engine: format!("FSDP under --sharding {}", self.options.sharding),
                reason: format!(
                    "set_full_params takes the model's {} float tensors whole ({} given)",
                    floats.len(),
                    values.len()
                ),
            });
        }
        // The module keeps what it held: whole tensors are replaced, empty ones stay empty.
        let module_values: Vec<Vec<f32>> = held
            .iter()
            .zip(values)
            .map(|(h, v)| if h.is_empty() { Vec::new() } else { v.clone() })
            .collect();
        self.core
            .map(|m| set_params_from_flat(m, &module_values).expect("one value per tensor"));
        let pieces: Vec<Vec<f32>> = self
            .pieces
            .piece_params()
            .iter()
            .map(|(p, range)| values[self.float_position(*p)][range.clone()].to_vec())
            .collect();
        let shard = self.pieces.shard().with_values(pieces);
        self.pieces.put(Some(shard));
        Ok(())
    }

    /// Hands `f` the value of every float tensor of the model in canonical order, the trainable
    /// ones whole, as [`full_params`](Self::full_params) returns them, but gathering one
    /// [`FullyShard`](super::FullyShard) block at a time (a collective under `full`): a digest
    /// or an export of a sharded model never holds the whole model (Note [One block at a
    /// time]).
    pub fn for_each_full_param(&mut self, f: &mut dyn FnMut(&[f32])) -> Result<()> {
        // Note [One block at a time]
        // Gathering the whole model on every rank to hash or export it makes the end of a
        // `full` run its peak: every parameter once more, next to the shards (a 70 M-parameter
        // MLP on 4 ranks peaked at 924 MB there, against about 600 MB in its steps). The
        // blocks' tensors sit together in canonical order (a block is one submodule), so the
        // walk gathers a block where its first tensor comes and drops it at the next block.
        // Every rank walks the same order, so the gathers match across the group.
        let was = self.root.is_unsharded();
        self.unshard()?;
        let values = params_to_flat(self.module())?;
        let mut of_block: HashMap<usize, (usize, usize)> = HashMap::new();
        for (b, block) in self.blocks.iter().enumerate() {
            for (j, &p) in block.unit.params().iter().enumerate() {
                of_block.insert(self.trainable[p], (b, j));
            }
        }
        let mut gathered: Option<(usize, Vec<Shaped>)> = None;
        for (k, v) in values.iter().enumerate() {
            let Some(&(b, j)) = of_block.get(&k) else {
                f(v);
                continue;
            };
            if gathered.as_ref().map(|(held, _)| *held) != Some(b) {
                drop(gathered.take()); // before the next block arrives
                gathered = Some((b, self.blocks[b].gather_now()?));
            }
            let (_, block) = gathered.as_ref().expect("gathered above");
            f(&block[j].0);
        }
        drop(gathered);
        if !was {
            self.reshard();
        }
        Ok(())
    }

    /// Averages this step's gradients, steps this rank's shard with `step` bucket by bucket as
    /// they arrive, and brings the updated parameters back (Note [Sharded step]); then
    /// synchronises the buffers. `step` is called with the shard and the gradients of the
    /// pieces of one bucket (an optimizer that treats parameters independently, as SGD, Adam
    /// and AdamW do, gives the same result as one step over all of them). A collective.
    pub fn sync_and_step(
        &mut self,
        grads: Gradients,
        mut step: impl FnMut(ShardParams, GradientsParams) -> ShardParams,
    ) -> Result<()> {
        self.synchronize(Some(grads), Apply::Fused, &mut step)
            .map(drop)
    }

    /// [`sync_and_step`](Self::sync_and_step) with every bucket averaged before any element is
    /// stepped, so that a step whose collectives fail leaves the shard as it was (what fault
    /// tolerance needs, Note [A regroup] in phalanx-train). Bitwise the same result.
    pub fn sync_and_step_unfused(
        &mut self,
        grads: Gradients,
        mut step: impl FnMut(ShardParams, GradientsParams) -> ShardParams,
    ) -> Result<()> {
        self.synchronize(Some(grads), Apply::Held, &mut step)
            .map(drop)
    }

    /// [`sync_and_step`](Self::sync_and_step) with PyTorch's `clip_grad_norm_(max_norm)` on
    /// the averaged gradients: the global L2 norm over every shard (one all-gather of a float
    /// per parameter per rank, summed in the order DDP sums it: bitwise DDP's norm, Note
    /// [Global norm] in `layout.rs`), then every gradient scaled by
    /// `min(1, max_norm / (norm + 1e-6))` before the step. Returns the norm before clipping.
    pub fn sync_and_step_clipped(
        &mut self,
        grads: Gradients,
        max_norm: f32,
        mut step: impl FnMut(ShardParams, GradientsParams) -> ShardParams,
    ) -> Result<f32> {
        let (_, norm) = self.synchronize(Some(grads), Apply::Clipped(max_norm), &mut step)?;
        Ok(norm.expect("a clipped step computes the norm"))
    }

    /// Gradient accumulation (`no_sync`): adds this step's gradients to a local accumulator
    /// (whole gradients, as DDP keeps them) without communication; the next synchronising
    /// step averages the sum. Under `full` with blocks, call
    /// [`set_requires_gradient_sync(false)`](Self::set_requires_gradient_sync) before this
    /// micro-step's backward.
    pub fn no_sync(&mut self, mut grads: Gradients) -> Result<()> {
        if !self.blocks.is_empty() && self.block_registry.sync() {
            return Err(Error::Options {
                reason: format!(
                    "rank {}: under --sharding full the FullyShard blocks reduce their \
                     gradients during the backward: call set_requires_gradient_sync(false) \
                     before the backward of a no_sync step",
                    self.core.pg().rank()
                ),
            });
        }
        let table = GradTable::new(self.module());
        self.check_table(&table)?;
        self.core.accumulate_used(&table, &grads);
        self.reducer.accumulate(&mut StepGradients {
            table: &table,
            grads: Some(&mut grads),
        })
    }

    /// Whether `no_sync` gradients are waiting for the next synchronisation.
    pub fn has_accumulated(&self) -> bool {
        self.reducer.has_accumulated() || self.blocks.iter().any(|b| b.has_accumulated())
    }

    /// Uneven inputs (PyTorch's `Join`; Note [Uneven inputs] in `ddp.rs`): called by a rank
    /// that has run out of batches. Until every rank has called it, this rank answers the
    /// others' steps with zero gradients and steps its shard with the averages, so that
    /// everyone's parameters stay identical. Returns the number of steps it shadowed. Under
    /// `full` each round also gathers the parameters, as the ranks still training do with
    /// [`unshard`](Self::unshard) before each forward; a model with
    /// [`FullyShard`](super::FullyShard) blocks is refused (their backward's collectives
    /// cannot be answered without running it).
    pub fn join(
        &mut self,
        mut step: impl FnMut(ShardParams, GradientsParams) -> ShardParams,
    ) -> Result<usize> {
        let (rank, accumulated) = (self.core.pg().rank(), self.has_accumulated());
        // After the refusal of accumulated gradients, which step_core::join makes.
        if !accumulated && !self.blocks.is_empty() {
            return Err(Error::Options {
                reason: format!(
                    "rank {}: join() under --sharding full with FullyShard blocks: a joined \
                     rank cannot answer the blocks' collectives of a backward it does not run; \
                     give every rank the same number of batches (DistributedSampler pads)",
                    rank
                ),
            });
        }
        step_core::join(rank, accumulated, || {
            self.unshard()?;
            Ok(self.synchronize(None, Apply::Fused, &mut step)?.0)
        })
    }

    /// One synchronising step (Note [Sharded step]); without `grads`, a joined rank's round.
    fn synchronize(
        &mut self,
        grads: Option<Gradients>,
        apply: Apply,
        step: &mut dyn FnMut(ShardParams, GradientsParams) -> ShardParams,
    ) -> Result<(Agreement, Option<f32>)> {
        let _warm = crate::compute_pool::keep_warm();
        // A step not taken is kept for the regroup that follows its failure only.
        self.prepared = None;
        let mut grads = grads;
        let table = GradTable::new(self.module());
        if grads.is_some() {
            self.check_table(&table)?;
        }
        // What the blocks' backward left: their reduce-scatters in flight (started now for
        // gradients they accumulated, Note [Microbatched units]), and what they used.
        for block in &self.blocks {
            block.flush();
        }
        let from_blocks: Vec<_> = self.blocks.iter().map(|b| b.take_gradients()).collect();
        let result = self.step_all(&table, &mut grads, apply, step, from_blocks);
        for block in &self.blocks {
            block.end_step();
        }
        self.block_registry.end_step();
        let failure = self.blocks.iter().find_map(|b| b.take_failure());
        let (prepared, norm) = result?;
        if let Some(reason) = failure {
            return Err(Error::Options { reason });
        }
        self.core.sync_buffers(&prepared.agreement)?;
        let agreement = prepared.agreement.clone();
        if apply == Apply::Fused {
            return Ok((agreement, norm));
        }
        // Note [Commit vote]: every rank holds its averaged gradients once this completes.
        if let Err(source) = self
            .core
            .pg()
            .allreduce(&mut [1i64], phalanx_core::ReduceOp::Sum)
        {
            self.prepared = Some(Box::new(prepared));
            return Err(Error::Sync {
                op: "allreduce(the step's commit vote)",
                source,
            });
        }
        self.apply_prepared(prepared, step)?;
        Ok((agreement, norm))
    }

    /// Steps the shard with a held step's gradients, and brings the updated parameters back
    /// (Note [Sharded step]).
    fn apply_prepared(
        &mut self,
        prepared: Prepared,
        step: &mut dyn FnMut(ShardParams, GradientsParams) -> ShardParams,
    ) -> Result<()> {
        let roots = self.root.units().len();
        let gather = !self.options.sharding.shards_parameters();
        let mut shard = self.pieces.take();
        let mut gathers = Vec::new();
        let mut failed = None;
        for (u, own) in &prepared.held {
            let unit = self.unit(*u);
            let s = shard.take().expect("shard is present between calls");
            let s = self
                .pieces
                .step_unit(unit, s, own, &prepared.agreement, step);
            if gather && *u < roots {
                match self.pieces.own_values(unit, &s) {
                    Ok(values) => gathers.push(gather_unit(&self.groups.shard, unit, values)),
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
            shard = Some(s);
        }
        self.pieces.put(shard);
        let gathered = wait_all(gathers);
        failed.map_or(Ok(()), Err)?;
        self.place_gathered(gathered?);
        Ok(())
    }

    /// Puts the gathered updated parameters into the module, or frees the gathered ones where
    /// parameters are sharded.
    fn place_gathered(&mut self, gathered: Vec<Vec<f32>>) {
        let ownership = self.pieces.ownership();
        self.root
            .place_gathered(&mut self.core, ownership, gathered);
    }

    fn step_all(
        &mut self,
        table: &GradTable,
        grads: &mut Option<Gradients>,
        apply: Apply,
        step: &mut dyn FnMut(ShardParams, GradientsParams) -> ShardParams,
        from_blocks: Vec<super::unit::UnitGradients>,
    ) -> Result<(Prepared, Option<f32>)> {
        let block_used: Vec<(usize, bool)> = self
            .blocks
            .iter()
            .zip(&from_blocks)
            .flat_map(|(b, g)| b.unit.params().iter().copied().zip(g.used.clone()))
            .collect();
        let header = self.core.header(table, grads.as_ref(), &block_used);
        let rank = self.groups.shard.rank();
        let params = self.core.infos().len();
        let mut shard = self.pieces.take();
        let mut held: Vec<(usize, Vec<f32>)> = Vec::new();
        let mut gathers: Vec<Work<Vec<f32>>> = Vec::new();
        let gather = !self.options.sharding.shards_parameters();
        let mut failed = None;
        let (units, pieces, pg, shard_pg) = (
            self.root.units(),
            &self.pieces,
            self.core.pg(),
            &self.groups.shard,
        );
        let mut k = 0;
        let synced = self.reducer.synchronize(
            pg,
            self.hook.as_ref(),
            header,
            params,
            &mut StepGradients {
                table,
                grads: grads.as_mut(),
            },
            |_, buf, agreed| {
                let unit = &units[k];
                k += 1;
                let mut own = buf[unit.block(rank)].to_vec();
                if let Some(s) = agreed.rescale() {
                    own.iter_mut().for_each(|g| *g *= s);
                }
                if apply != Apply::Fused {
                    held.push((k - 1, own));
                    return;
                }
                let s = shard.take().expect("shard is present between calls");
                let s = pieces.step_unit(unit, s, &own, agreed, step);
                if gather {
                    match pieces.own_values(unit, &s) {
                        Ok(values) => gathers.push(gather_unit(shard_pg, unit, values)),
                        Err(e) => failed = failed.take().or(Some(e)),
                    }
                }
                shard = Some(s);
            },
        );
        let result = synced.and_then(|agreement| {
            failed.map_or(Ok(()), Err)?;
            // The blocks' gradients, reduce-scattered during the backward.
            let roots = units.len();
            for (b, from) in from_blocks.into_iter().enumerate() {
                let Some(work) = from.work else { continue };
                let unit = &self.blocks[b].unit;
                let mut own = work.wait().map_err(|source| Error::Collective {
                    op: "reduce_scatter_v(a FullyShard block's gradients)",
                    bucket: b,
                    source,
                })?;
                debug_assert_eq!(own.len(), unit.block(rank).len());
                if let Some(replica) = &self.groups.replica {
                    replica
                        .allreduce(&mut own, phalanx_core::ReduceOp::Avg)
                        .map_err(|source| Error::Collective {
                            op: "allreduce(a FullyShard block's gradients, across replicas)",
                            bucket: b,
                            source,
                        })?;
                }
                if let Some(s) = agreement.rescale() {
                    own.iter_mut().for_each(|g| *g *= s);
                }
                match apply {
                    Apply::Held | Apply::Clipped(_) => held.push((roots + b, own)),
                    Apply::Fused => {
                        let s = shard.take().expect("shard is present between calls");
                        let s = pieces.step_unit(unit, s, &own, &agreement, step);
                        shard = Some(s);
                    }
                }
            }
            let norm = match apply {
                Apply::Clipped(max_norm) => {
                    let norm = self.global_norm(&held)?;
                    let coef = (max_norm / (norm + 1e-6)).min(1.0);
                    if coef < 1.0 {
                        for (_, own) in &mut held {
                            own.iter_mut().for_each(|g| *g *= coef);
                        }
                    }
                    Some(norm)
                }
                Apply::Fused | Apply::Held => None,
            };
            Ok((agreement, norm))
        });
        self.pieces.put(shard);
        // Every launched all-gather completes before anything is returned; a held step
        // launches none before its vote (Note [Commit vote]).
        let gathered = wait_all(gathers);
        let (agreement, norm) = result?;
        if apply == Apply::Fused {
            self.place_gathered(gathered?);
        }
        Ok((Prepared { held, agreement }, norm))
    }

    /// Unit `u`: the root's first, then the blocks'.
    fn unit(&self, u: usize) -> &Unit {
        let roots = self.root.units();
        match u < roots.len() {
            true => &roots[u],
            false => &self.blocks[u - roots.len()].unit,
        }
    }

    /// The global L2 norm of the averaged gradients over every rank's shard (Note [Global
    /// norm]): this rank's sum of squares per parameter, gathered from every rank, folded
    /// parameter by parameter, rank by rank.
    fn global_norm(&self, held: &[(usize, Vec<f32>)]) -> Result<f32> {
        let mut partial = vec![0f64; self.core.infos().len()];
        for (u, own) in held {
            self.pieces
                .sums_of_squares(self.unit(*u), own, &mut partial);
        }
        // A shard group holds every element once (the replicas hold the same averages).
        let world = self.groups.shard.world_size();
        let mut all = vec![0f64; partial.len() * world];
        self.groups
            .shard
            .allgather(&partial, &mut all)
            .map_err(|source| Error::Sync {
                op: "allgather(gradient norms)",
                source,
            })?;
        let by_rank: Vec<&[f64]> = all.chunks(partial.len().max(1)).collect();
        let squares = match &self.options.ddp.model_norm {
            // Per parameter, over the shard group, then over the model's other pieces.
            Some(norm) => {
                let per_param: Vec<f64> = (0..partial.len())
                    .map(|p| by_rank.iter().map(|r| r[p]).sum())
                    .collect();
                norm.total(&per_param)?
            }
            None => fold_norm(&by_rank, self.core.infos().len()),
        };
        Ok(squares.sqrt() as f32)
    }

    /// The module's root parameters are still the ones the engine wrapped.
    fn check_table(&self, table: &GradTable) -> Result<()> {
        if !self.core.table_changed(table) {
            return Ok(());
        }
        Err(match self.root.is_unsharded() {
            true => Error::ModelChanged {
                rank: self.core.pg().rank(),
            },
            false => Error::Options {
                reason: format!(
                    "rank {}: the gradients come from a forward pass on the sharded module; \
                     under --sharding full call unshard() before the forward pass",
                    self.core.pg().rank()
                ),
            },
        })
    }
}

/// FSDP keeps this rank's pieces: the optimizer steps [`ShardParams`].
impl<M: Module> DataParallel<M> for FullyShardedDataParallel<M> {
    type Params = ShardParams;

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
        FullyShardedDataParallel::unshard(self)?;
        Ok(self.core.module())
    }

    fn reshard(&mut self) {
        FullyShardedDataParallel::reshard(self);
    }

    fn full_params(&mut self) -> Result<Vec<Vec<f32>>> {
        FullyShardedDataParallel::full_params(self)
    }

    fn for_each_full_param(&mut self, f: &mut dyn FnMut(&[f32])) -> Result<()> {
        FullyShardedDataParallel::for_each_full_param(self, f)
    }

    fn set_full_params(&mut self, values: &[Vec<f32>]) -> Result<()> {
        FullyShardedDataParallel::set_full_params(self, values)
    }

    fn set_requires_gradient_sync(&mut self, yes: bool) {
        FullyShardedDataParallel::set_requires_gradient_sync(self, yes);
    }

    fn set_reshard_after_backward(&mut self, yes: bool) {
        FullyShardedDataParallel::set_reshard_after_backward(self, yes);
    }

    fn step(
        &mut self,
        grads: Gradients,
        kind: StepKind,
        mut step: impl FnMut(ShardParams, GradientsParams) -> ShardParams,
    ) -> Result<Option<f32>> {
        let apply = match kind {
            StepKind::Fused => Apply::Fused,
            StepKind::Unfused => Apply::Held,
            StepKind::Clipped(max_norm) => Apply::Clipped(max_norm),
        };
        Ok(self.synchronize(Some(grads), apply, &mut step)?.1)
    }

    fn no_sync(&mut self, grads: Gradients) -> Result<()> {
        FullyShardedDataParallel::no_sync(self, grads)
    }

    fn has_accumulated(&self) -> bool {
        FullyShardedDataParallel::has_accumulated(self)
    }

    fn join(
        &mut self,
        step: impl FnMut(ShardParams, GradientsParams) -> ShardParams,
    ) -> Result<usize> {
        FullyShardedDataParallel::join(self, step)
    }

    fn held_floats(&self) -> HeldFloats {
        let trainable: usize = self.core.infos().iter().map(ParamInfo::numel).sum();
        // The module's trainable tensors as they are now: whole, or empty where sharded.
        let kept: usize = param_infos(self.core.module())
            .iter()
            .zip(self.core.states())
            .filter(|(_, s)| s.kind == StateKind::Trainable)
            .map(|(i, _)| i.numel())
            .sum();
        let shard = self.pieces.shard().numel();
        HeldFloats {
            params: kept + shard,
            grads: match self.options.sharding.shards_gradients() {
                true => shard,
                false => trainable,
            },
        }
    }

    fn shard_view(&self) -> Option<ShardView<'_>> {
        Some(ShardView {
            pieces: self.pieces.piece_params(),
            float_positions: &self.trainable,
            shard: self.pieces.shard(),
            saves_pieces: self.saves_pieces(),
            saved_ranges: (0..self.core.infos().len())
                .map(|p| self.saved_ranges(p))
                .collect(),
            sharding: self.options.sharding.name(),
        })
    }

    fn into_inner(self) -> Result<M> {
        FullyShardedDataParallel::into_inner(self)
    }

    fn into_local(self) -> Result<Local<M>> {
        FullyShardedDataParallel::into_local(self).map(Local::Shard)
    }
}

/// Waits for every all-gather in `gathers`; the first failure, after all have ended.
fn wait_all(gathers: Vec<Work<Vec<f32>>>) -> Result<Vec<Vec<f32>>> {
    let mut gathered = Vec::with_capacity(gathers.len());
    let mut first_err = None;
    for (k, work) in gathers.into_iter().enumerate() {
        match wait_gather(work, k) {
            Ok(buffer) => gathered.push(buffer),
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    first_err.map_or(Ok(gathered), Err)
}

/// Positions among the float tensors of the trainable ones, in canonical order.
fn trainable_positions(states: &[StateInfo]) -> Vec<usize> {
    states
        .iter()
        .filter(|s| s.kind.is_float())
        .enumerate()
        .filter(|(_, s)| s.kind == StateKind::Trainable)
        .map(|(i, _)| i)
        .collect()
}
