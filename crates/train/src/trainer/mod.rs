//! The training loop behind `phalanx train`: one rank's view of the seed recipe.
//!
//! Per epoch: this rank's share from the PyTorch-exact [`DistributedSampler`], batched with
//! prefetch; forward, backward, gradients averaged by DDP bucket by bucket, SGD; then
//! evaluation on an exact (unpadded) shard of the test set with correct/total counts summed
//! over ranks. Rank 0 writes checkpoints (Note [Checkpoint commit]) and reports.
//!
//! [`DistributedSampler`]: phalanx_data::DistributedSampler

mod epochs;
mod island_checkpoint;
mod islands;
mod regroup;
mod resume;

pub use epochs::Summary;

use std::{sync::Arc, time::Instant};

use phalanx_checkpoint::position::Position;
use phalanx_core::ReduceOp;
use phalanx_data::Dataset;
use phalanx_ddp::outer::{DiLoCo, OuterState};
use phalanx_ddp::{fsdp::Sharding, Bf16CompressHook, DdpOptions};
use phalanx_pg::{FaultTolerance, ProcessGroup};

use crate::config::Regrouped;
pub use crate::config::{Reporter, TrainConfig};
use crate::{
    device,
    model::{freeze_matching, with_model, ModelSpec, WithModel},
    model_parallel::ModelParallel,
    parallel::{self, Wrapping},
    snapshot, Classifier, Error, Optim, Result,
};
use epochs::{Attempt, Context, Outcome, Totals};
use regroup::Held;
use resume::resume_from_disk;

/// Runs the whole training on this rank: builds `cfg.model` and trains it.
pub fn train(
    pg: Arc<ProcessGroup>,
    cfg: &TrainConfig,
    reporter: &mut dyn Reporter,
) -> Result<Summary> {
    train_in(Group::Fixed(pg), cfg, reporter).map(ran)
}

/// A run in a given group always runs to its end.
fn ran(summary: Option<Summary>) -> Summary {
    summary.expect("only a fault-tolerant joiner can find the run over")
}

/// [`train`] under `phalanx launch --fault-tolerance` (Note [FT generations] in phalanx-pg): when
/// a rank dies, the others re-form their group without it and go on from their in-memory state;
/// its replacement loads the data and builds the model first, then joins them at a step
/// boundary and takes their state (Note [A regroup] in `trainer/regroup/replicas.rs`). At every
/// change of the group the rest of the epoch is re-sharded over the ranks alive (as a resume at
/// another world size is), so no sample of the epoch is skipped.
///
/// `None`: this process was a joiner (a replacement, or a rank of a node admitted into the
/// running round) and the run finished before it could join; it has nothing to do.
pub fn train_fault_tolerant(
    ft: FaultTolerance,
    cfg: &TrainConfig,
    reporter: &mut dyn Reporter,
) -> Result<Option<Summary>> {
    train_in(Group::Tolerant(Box::new(ft)), cfg, reporter)
}

fn train_in(
    group: Group,
    cfg: &TrainConfig,
    reporter: &mut dyn Reporter,
) -> Result<Option<Summary>> {
    // In islands, the other islands hold copies of an island's state (Note [Islands of
    // shards that leave and join]).
    let recoverable =
        matches!(cfg.sharding, Sharding::None | Sharding::Hybrid) || cfg.outer.is_some();
    if matches!(group, Group::Tolerant(_)) && !recoverable {
        return Err(Error::Config(format!(
            "--fault-tolerance with --sharding {}: a rank that dies takes its shard of the \
             optimizer state{} with it, and no other rank holds a copy, so the survivors cannot \
             re-form the group in process; train with --max-restarts and --checkpoint-every \
             instead (the group restarts from the newest sharded checkpoint, at any world size), \
             or under --sharding hybrid, whose shard groups are each other's copies",
            cfg.sharding,
            match cfg.sharding {
                Sharding::Optimizer => "",
                Sharding::Grad => " and gradients",
                _ => " and parameters",
            }
        )));
    }
    if cfg.sequence_parallel {
        crate::tensor_parallel::check_sequence_parallel(cfg.tp, cfg.seq_len)?;
    }
    islands::check(cfg)?;
    if (cfg.tp > 1 || cfg.pp.stages > 1)
        && matches!(group, Group::Tolerant(_))
        && cfg.sharding != Sharding::None
    {
        return Err(Error::Config(format!(
            "--fault-tolerance with {} and --sharding {}: a replica that lost a rank takes its \
             pieces from a data-parallel peer that holds them whole, and that is built for \
             --sharding none only; train with --max-restarts instead",
            crate::model_parallel::flags(cfg),
            cfg.sharding
        )));
    }
    let full = match cfg.model.reads_text() {
        true => phalanx_data::load_text(&cfg.dataset, cfg.seq_len)?,
        false => phalanx_data::load(&cfg.dataset)?,
    };
    cfg.model.check_input(&cfg.dataset, full.dim())?;
    if cfg.batch_size == 0 {
        return Err(Error::Config("--batch-size must be at least 1".into()));
    }
    let spec = ModelSpec {
        kind: cfg.model,
        input: full.dim(),
        classes: full.classes(),
        hidden: cfg.hidden,
        depth: cfg.depth,
        heads: cfg.heads,
        dropout: cfg.dropout,
        seed: cfg.seed,
    };
    if cfg.model.reads_text() {
        spec.gpt().check().map_err(Error::Config)?;
    }
    let run = Run {
        group,
        cfg,
        reporter,
        full,
        spec,
    };
    with_model(&spec, &device(), run)
}

/// The process group a run trains in: given, or joined (and re-joined) through fault tolerance.
enum Group {
    Fixed(Arc<ProcessGroup>),
    Tolerant(Box<FaultTolerance>),
}

/// The rest of [`train`], for the model it built.
struct Run<'a> {
    group: Group,
    cfg: &'a TrainConfig,
    reporter: &'a mut dyn Reporter,
    full: Dataset,
    /// What the model was built from: fault tolerance under a cut model builds it again for
    /// each generation's cut.
    spec: ModelSpec,
}

impl WithModel for Run<'_> {
    type Output = Result<Option<Summary>>;

    fn run<M: Classifier>(self, model: M) -> Result<Option<Summary>> {
        let spec = self.spec;
        let cfg = self.cfg;
        let build = move || build_again::<M>(&spec, cfg);
        train_group(
            self.group,
            cfg,
            self.reporter,
            &self.full,
            model,
            Some(&build),
        )
    }
}

/// The model `spec` builds, as a [`Run`] was handed it, frozen as `cfg` says: undrawn under
/// deferred init (Note [Replicas that leave and join]).
fn build_again<M: Classifier>(spec: &ModelSpec, cfg: &TrainConfig) -> Result<M> {
    struct Again;
    impl WithModel for Again {
        type Output = Box<dyn std::any::Any>;
        fn run<N: Classifier>(self, model: N) -> Self::Output {
            Box::new(model)
        }
    }
    let model = *with_model(spec, &device(), Again)
        .downcast::<M>()
        .expect("one spec builds one type of model");
    Ok(match &cfg.freeze {
        Some(patterns) => freeze_matching(model, patterns)?.0,
        None => model,
    })
}

/// Trains `model` (any [`Classifier`]) as `cfg` says: the library-level trainer behind
/// `phalanx train`, with DDP, the sampler, evaluation, checkpoints and resume.
pub fn train_model<M: Classifier>(
    pg: Arc<ProcessGroup>,
    cfg: &TrainConfig,
    reporter: &mut dyn Reporter,
    full: &Dataset,
    model: M,
) -> Result<Summary> {
    train_group(Group::Fixed(pg), cfg, reporter, full, model, None).map(ran)
}

fn train_group<M: Classifier>(
    group: Group,
    cfg: &TrainConfig,
    reporter: &mut dyn Reporter,
    full: &Dataset,
    model: M,
    build: Option<&dyn Fn() -> Result<M>>,
) -> Result<Option<Summary>> {
    let (mut pg, mut ft) = match group {
        Group::Fixed(pg) => (Some(pg), None),
        Group::Tolerant(ft) => (None, Some(*ft)),
    };
    // This process's identity in reports (its rank in the round's first group), and that
    // group's size, which fixes the learning-rate schedule's horizon whatever ranks come and go.
    let (slot, slots) = match (&ft, &pg) {
        (Some(ft), _) => (ft.slot(), ft.slots()),
        (None, Some(pg)) => (pg.rank(), pg.world_size()),
        (None, None) => unreachable!("a run has a group or a way to one"),
    };
    let (train_set, test_set) = full.split(cfg.test_fraction, cfg.seed)?;
    if model.input_dim() != full.dim() {
        return Err(Error::Config(format!(
            "the model takes {} features per sample, --dataset {} has {}",
            model.input_dim(),
            cfg.dataset,
            full.dim()
        )));
    }
    let mut model = model;
    if let Some(patterns) = &cfg.freeze {
        let (frozen, paths) = freeze_matching(model, patterns)?;
        if slot == 0 {
            tracing::info!(frozen = paths.len(), "--freeze: {}", paths.join(", "));
        }
        model = frozen;
    }
    let mut ctx = Context {
        cfg,
        facts: snapshot::run_facts(cfg, full),
        train_set: Arc::new(train_set),
        test_set,
        // Under fault tolerance a failed step must leave the model as it was (Note [A regroup]).
        fused: ft.is_none(),
        slot,
        slots,
        mp: None,
        islands: cfg.outer.is_some(),
        keep_previous: false,
    };
    let mut optim = Optim::new(cfg.optim);
    let mut totals = Totals::default();
    // Under --outer the islands keep their size through regroups, and the generations the run
    // trains in are made of whole islands (Note [Whole blocks] in phalanx-pg): a joiner too
    // knows that before it joins.
    let outer_options = cfg.outer.as_ref().map(|o| {
        let local = match (&pg, &ft) {
            (Some(pg), _) => pg.local_world_size(),
            (None, Some(ft)) => ft.local_world_size(),
            (None, None) => unreachable!("a run has a group or a way to one"),
        };
        o.clone()
            .with_island_size(Some(o.island_size.unwrap_or(local)))
    });
    if let (Some(options), Some(ft)) = (&outer_options, ft.as_mut()) {
        let size = options.island_size.unwrap_or(1);
        // The islands are each other's copies (Note [Islands of shards that leave and join]):
        // one island alone has none of a dead rank's pieces.
        if !matches!(cfg.sharding, Sharding::None | Sharding::Hybrid) && slots <= size {
            return Err(Error::Config(format!(
                "--fault-tolerance with --outer and --sharding {}: the other islands hold the \
                 copies of an island's shards, and this run is one island of {size} rank(s) \
                 (world {slots}), so a rank that dies takes its shard with it; use \
                 --island-size below {slots}",
                cfg.sharding
            )));
        }
        ft.set_block(size);
    }
    // Note [Replicas that leave and join]: a cut model's replicas live and die whole, and each
    // generation cuts its pieces anew from the model built again.
    let cut = cfg.tp > 1 || cfg.pp.stages > 1;
    let recut = match (cut, ft.as_mut(), build) {
        (true, Some(ft), Some(build)) => {
            let replica = cfg.tp * cfg.pp.stages;
            if slots / replica < 2 || !slots.is_multiple_of(replica) {
                return Err(Error::Config(format!(
                    "--fault-tolerance with {}: a replica that loses a rank takes its pieces \
                     from another replica, so the world must hold at least two replicas of \
                     tp × pp = {replica} ranks; it has {slots} rank(s)",
                    crate::model_parallel::flags(cfg)
                )));
            }
            ft.set_block(replica);
            ctx.keep_previous = true;
            Some(build)
        }
        _ => None,
    };
    // Only now, with the data loaded and the model built, does a replacement ask to join.
    let mut pg = match (pg.take(), ft.as_mut()) {
        (Some(pg), _) => pg,
        (None, Some(ft)) => {
            let Some(pg) = ft.join()? else {
                return Ok(None);
            };
            let pg = Arc::new(pg);
            pg.abort_on_panic();
            pg
        }
        (None, None) => unreachable!("a run has a group or a way to one"),
    };
    // A run's ranks agree on the model and its layout (a fault-tolerant joiner's group is
    // checked by its peers' state instead, Note [A regroup]).
    if ft.is_none() {
        crate::model_parallel::check_same_layout(&pg, cfg)?;
    }
    let replacement = ft.as_ref().is_some_and(FaultTolerance::is_replacement);
    // Note [Tensor-parallel run], Note [Pipeline run]: the model cut on the mesh's "pp" group
    // and split on its "tp" group, the engine and the data on its "dp" group. A resume reads
    // the whole checkpoint into the whole model on every rank first, and cuts the optimizer's
    // state as the model is cut (Note [Pieces of a cut model] in phalanx-checkpoint).
    let mut resumed = None;
    // A replacement cuts its piece in its first attempt, as the running ranks do theirs.
    if cut && !replacement {
        let (pos, state) = resume_from_disk(&pg, cfg, &ctx.facts, &mut model, reporter, true)?;
        let (parts, split) = ModelParallel::split(&pg, cfg, model, recut.is_some())?;
        let state = state.map(|s| parts.pieces().cut_state(&s)).transpose()?;
        resumed = Some((pos, state));
        model = split;
        ctx.mp = Some(parts);
    }
    // Note [Islands run]: the engine on this rank's island, the data over the whole group.
    // Each generation has its own mesh; what a rank's outer sync holds goes from one to the
    // next (Note [Islands that leave and join] in phalanx-ddp).
    let mut outer: Option<DiLoCo> = None;
    let mut outer_state: Option<OuterState> = None;
    // The generation the pieces were cut for (none yet: a replacement's).
    let mut cut_for = match replacement {
        true => None,
        false => ft.as_ref().map(FaultTolerance::generation),
    };
    let mut ctx = ctx;
    // A replacement has no state of its own: it takes a peer's before anything else.
    let mut held = match (replacement, resumed) {
        (true, _) => Held::replacement(model),
        (false, Some((pos, state))) => Held::start(model, pos, state),
        (false, None) => {
            let (pos, state) = resume_from_disk(&pg, cfg, &ctx.facts, &mut model, reporter, false)?;
            match (&cfg.checkpoint_dir, &outer_options) {
                // Note [Island checkpoints]: each rank its island's model and optimizer, and
                // its chunk of the outer state.
                (Some(dir), Some(options)) if cfg.resume && pos.global_step > 0 => {
                    let flags = island_checkpoint::outer_flags(options);
                    let at_rank = (pos.global_step, pg.rank(), pg.world_size());
                    let size = options.check(&pg)?;
                    let place = (pg.rank() / size, pg.rank() % size, size);
                    let r = island_checkpoint::load(dir, at_rank, place, &flags, model)?;
                    if let (Some(from), 0) = (r.reshaped, pg.rank()) {
                        eprintln!(
                            "phalanx train: resumed step {} at another layout: {from} (not \
                             the uninterrupted run bitwise: Note [A resume at another layout] \
                             in phalanx-ddp)",
                            pos.global_step
                        );
                    }
                    outer_state = Some(OuterState::restore(r.outer));
                    Held::start(r.model, pos, r.optim)
                }
                _ => Held::start(model, pos, state),
            }
        }
    };
    // Under fault tolerance with shards, the shard groups' size the run started with.
    let sharded = cfg.sharding != Sharding::None;
    let group_size = cfg.shard_group_size.unwrap_or(pg.local_world_size());
    loop {
        let attempt = (|| -> Result<Outcome> {
            // A new generation is a new mesh, whose groups a piece holds in its modules: the
            // pieces are cut anew (Note [Replicas that leave and join]).
            let piece = match (recut, ft.as_ref()) {
                (Some(build), Some(ft)) if Some(ft.generation()) != cut_for => {
                    let (mp, piece) = ModelParallel::split(&pg, cfg, build()?, true)?;
                    ctx.mp = Some(mp);
                    cut_for = Some(ft.generation());
                    Some(piece)
                }
                _ => None,
            };
            let mut options = DdpOptions::default().with_bucket_memory(cfg.bucket_memory);
            if cfg.bf16 {
                options = options.with_comm_hook(Bf16CompressHook);
            }
            // A cut model's norm spans its pieces (Note [Norm across a cut model]).
            if let Some(mp) = &ctx.mp {
                options = options.with_model_norm(mp.norm());
            }
            // Under --outer: this generation's islands first (a collective of the world), and
            // whether this rank's island is whole in its state: an island whose ranks hold
            // one step keeps its own progress, any other takes a peer island's.
            if let (Some(options), None) = (&outer_options, &outer) {
                outer = Some(DiLoCo::new(&pg, options.clone())?);
            }
            let held_before = held.held_position();
            let intact = match &outer {
                Some(o) => islands::intact(o.island(), held_before)?,
                None => false,
            };
            let mut source = match (recut, &ctx.mp) {
                (Some(_), Some(mp)) => {
                    held.resync_pieces((&pg, &mp.dp), piece, &mut optim, &mut totals.epoch_loss)?
                }
                _ => {
                    let island = outer.as_ref().map(|o| o.island().as_ref());
                    held.resync((&pg, island), &mut optim, sharded, intact)?
                }
            };
            let fresh = !intact || held_before != Some(held.position());
            // The engine's group: the world's, the "dp" group of a model-parallel run, or this
            // rank's island.
            let engine_group = match (&ctx.mp, &outer) {
                (Some(mp), _) => mp.dp.clone(),
                (None, Some(outer)) => outer.island().clone(),
                (None, None) => pg.clone(),
            };
            if source.is_some() {
                // Every rank holds the source's state already.
                options = options.with_broadcast_params(false);
            }
            // Fault tolerance under DDP goes on with its own copy after a failure.
            let wrapped = held.lend(ft.is_some() && !sharded);
            // Under fault tolerance the group may have shrunk: shard groups of the run's size
            // where that divides the ranks alive, else one group of them all.
            // Islands regroup whole, so theirs keep their size.
            let shard_group_size = match ft.is_some() && sharded && outer.is_none() {
                true => Some(match pg.world_size().is_multiple_of(group_size) {
                    true => group_size,
                    false => pg.world_size(),
                }),
                false => cfg.shard_group_size,
            };
            let wrapping = Wrapping {
                sharding: cfg.sharding,
                reshard_after_forward: cfg.reshard_after_forward,
                shard_group_size,
                ddp: options,
            };
            let ft = ft.as_ref();
            let mut after_regroup = |at: Position, reporter: &mut dyn Reporter| {
                if let Some(source) = source.take() {
                    reporter.regrouped(&Regrouped {
                        generation: ft.map_or(0, FaultTolerance::generation),
                        members: ft.map(|f| f.members().to_vec()).unwrap_or_default(),
                        source: source.rank,
                        position: at,
                        seconds: source.since.elapsed().as_secs_f64(),
                        replacement: source.replacement,
                    });
                }
            };
            // Under fault tolerance the ranks agree every step on the newest generation: a
            // newer one (a replacement is ready) is connected at this boundary.
            let mut boundary = |pg: &ProcessGroup| -> Result<Option<u64>> {
                let Some(ft) = ft else { return Ok(None) };
                let mut newest = [ft.newest()? as i64];
                pg.allreduce(&mut newest, ReduceOp::Max)?;
                Ok((newest[0] as u64 > ft.generation()).then_some(newest[0] as u64))
            };
            let attempt = Attempt {
                ctx: &ctx,
                pg: &engine_group,
                world: &pg,
                optim: &mut optim,
                at: held.position(),
                pending_state: held.optim_state(),
                totals: &mut totals,
                reporter,
                after_regroup: &mut after_regroup,
                boundary: &mut boundary,
                // Only fault tolerance goes on with the model after the run of epochs.
                keep: ft.is_some(),
                outer: outer.as_mut(),
                // A copy: an attempt that fails before it heals leaves the state as it was.
                outer_start: (outer_state.clone(), fresh),
            };
            let (at, result, kept, previous) =
                parallel::with_engine(wrapped, engine_group.clone(), wrapping, attempt)??;
            held.end_attempt(at, kept, previous);
            result
        })();
        match (attempt, ft.as_mut()) {
            (Ok(Outcome::Done(summary)), ft) => {
                // A rank still joining has nothing left to do (Note [FT generations]).
                if let Some(ft) = ft {
                    ft.finish(&pg)?;
                }
                return Ok(Some(summary));
            }
            (Ok(Outcome::Advance(to)), Some(ft)) => {
                let since = Instant::now();
                // A new generation's islands get a new mesh.
                if let Some(state) = outer.take().and_then(DiLoCo::into_state) {
                    outer_state = Some(state);
                }
                drop(pg);
                pg = Arc::new(ft.advance(to)?);
                pg.abort_on_panic();
                held.group_changed(since);
            }
            // A subgroup's collective (a shard group's, a replica group's) can fail before the
            // whole group learns of it: that rank breaks the group for everyone.
            (Err(e), Some(ft)) if pg.failure().is_some() || broke_a_group(&e) => {
                if pg.failure().is_none() {
                    pg.abort(&e.to_string());
                }
                // A cut model's groups are the mesh's, not the world's: each is broken too, so
                // that no peer waits in one for this rank (Note [Replicas that leave and
                // join]).
                if let Some(mp) = ctx.mp.take() {
                    mp.abort(&e.to_string());
                }
                if let Some(o) = outer.take() {
                    // No island waits for this rank in a sync until its timeout. A mesh that
                    // failed before it healed holds nothing: the state stays as it was.
                    o.abort(&e.to_string());
                    if let Some(state) = o.into_state() {
                        outer_state = Some(state);
                    }
                }
                // An attempt that failed before its engine gave the model back (a sharding
                // engine takes it whole, and its own setup, a collective, can fail under a
                // second death) left this rank without its state: it takes a peer's, as a
                // replacement does, into the model built again (after the aborts above, so
                // that no peer waits on this rank meanwhile).
                if held.is_lent() {
                    let Some(build) = build else {
                        return Err(e);
                    };
                    held.lost(build()?);
                }
                let failed_at = Instant::now();
                tracing::warn!(
                    slot,
                    generation = ft.generation(),
                    "fault tolerance: the process group failed ({e}); re-forming it"
                );
                let cause = match e {
                    Error::Pg(e) => e,
                    other => phalanx_pg::Error::Failed {
                        rank: slot,
                        cause: other.to_string(),
                    },
                };
                drop(pg);
                // Islands and a cut model's replicas regroup in whole blocks.
                pg = match outer_options.is_some() || recut.is_some() {
                    false => Arc::new(ft.regroup(cause)?),
                    true => {
                        let Some(new) = ft.regroup_whole(cause)? else {
                            // Left alone in its island, it joined again and the run ended
                            // before it could.
                            return Ok(None);
                        };
                        if ft.take_rejoined() {
                            // It takes everything from a peer island, as a replacement.
                            held.forget();
                            outer_state = None;
                        }
                        Arc::new(new)
                    }
                };
                pg.abort_on_panic();
                held.group_changed(failed_at);
            }
            (Err(e), _) => return Err(e),
            (Ok(Outcome::Advance(_)), None) => unreachable!("only fault tolerance advances"),
        }
    }
}

/// Whether `e` is a collective's failure (of the group or of one of its subgroups).
fn broke_a_group(e: &Error) -> bool {
    use phalanx_ddp::Error as Ddp;
    matches!(
        e,
        Error::Pg(_)
            | Error::Ddp(
                Ddp::Collective { .. }
                    | Ddp::Sync { .. }
                    | Ddp::Setup { .. }
                    | Ddp::OuterSync { .. }
            )
    )
}
