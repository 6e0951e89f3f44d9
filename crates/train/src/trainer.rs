//! The training loop behind `phalanx train`: one rank's view of the seed recipe.
//!
//! Per epoch: this rank's share from the PyTorch-exact [`DistributedSampler`], batched with
//! prefetch; forward, backward, gradients averaged by DDP bucket by bucket, SGD; then
//! evaluation on an exact (unpadded) shard of the test set with correct/total counts summed
//! over ranks. Rank 0 writes checkpoints (Note [Checkpoint commit]) and reports.
//!
//! [`DistributedSampler`]: phalanx_data::DistributedSampler

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use phalanx_core::{trace, ReduceOp};
use phalanx_data::{exact_shard, DataLoader, Dataset};
use phalanx_ddp::{
    fsdp::{seed_step, Sharding},
    Bf16CompressHook, DdpOptions,
};
use phalanx_pg::{FaultTolerance, ProcessGroup};

pub use crate::config::{Reporter, TrainConfig};
use crate::{
    checkpoint, device, evaluate,
    metrics::EpochRecord,
    model::{freeze_matching, with_model, ModelSpec, WithModel},
    parallel::{Parallel, StepKind},
    position::{self, Handover, Position},
    recovery::{resync, Regrouped},
    recovery_shards::resync_sharded,
    snapshot,
    stop::{self, StopCheck},
    Classifier, Error, Optim, Result,
};

/// What a finished run reports (one per rank).
#[derive(Debug, Clone)]
pub struct Summary {
    /// This rank.
    pub rank: usize,
    /// World size.
    pub world: usize,
    /// Epochs completed.
    pub epochs: u64,
    /// Final test accuracy.
    pub test_accuracy: f64,
    /// Training throughput over the run, all ranks together.
    pub samples_per_s: f64,
    /// Share of training time blocked on gradient communication.
    pub comm_fraction: f64,
    /// SHA-256 of this rank's final parameters in canonical order.
    pub param_digest: String,
    /// Per-epoch records.
    pub records: Vec<EpochRecord>,
}

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

/// [`train`] under `phalanx launch --fault-tolerance` (Note [Generations] in phalanx-pg): when
/// a rank dies, the others re-form their group without it and go on from their in-memory state;
/// its replacement loads the data and builds the model first, then joins them at a step
/// boundary and takes their state (Note [Regroup] in `recovery.rs`). At every change of the
/// group the rest of the epoch is re-sharded over the ranks alive (as a resume at another
/// world size is), so no sample of the epoch is skipped.
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
    let recoverable = matches!(cfg.sharding, Sharding::None | Sharding::Hybrid);
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
    let full = phalanx_data::load(&cfg.dataset)?;
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
        seed: cfg.seed,
    };
    let run = Run {
        group,
        cfg,
        reporter,
        full,
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
}

impl WithModel for Run<'_> {
    type Output = Result<Option<Summary>>;

    fn run<M: Classifier>(self, model: M) -> Result<Option<Summary>> {
        train_group(self.group, self.cfg, self.reporter, &self.full, model)
    }
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
    train_group(Group::Fixed(pg), cfg, reporter, full, model).map(ran)
}

/// Figures summed over the run, kept across a regroup.
#[derive(Default)]
struct Totals {
    records: Vec<EpochRecord>,
    train_time: Duration,
    train_samples: usize,
    comm_wait: Duration,
    last_accuracy: f64,
    epochs_done: u64,
    /// The epoch in progress: its loss sum and count and samples, kept by a survivor of a
    /// regroup (a replacement starts them at zero).
    epoch_loss: (f64, usize, usize),
}

fn train_group<M: Classifier>(
    group: Group,
    cfg: &TrainConfig,
    reporter: &mut dyn Reporter,
    full: &Dataset,
    model: M,
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
    let ctx = Context {
        cfg,
        facts: snapshot::run_facts(cfg, full),
        train_set: Arc::new(train_set),
        test_set,
        // Under fault tolerance a failed step must leave the model as it was (Note [Regroup]).
        fused: ft.is_none(),
        slot,
        slots,
    };
    let mut optim = Optim::new(cfg.optim);
    let mut totals = Totals::default();
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
    // A replacement has no state of its own: it takes a peer's before anything else.
    let replacement = ft.as_ref().is_some_and(FaultTolerance::is_replacement);
    let mut pending_state = None;
    let (mut pos, mut regroup) = if replacement {
        (None, Some(Instant::now()))
    } else {
        let (pos, state) = resume_from_disk(&pg, cfg, &ctx.facts, &mut model, reporter)?;
        pending_state = state;
        (Some(pos), None)
    };
    let mut model = Some(model);
    // Under fault tolerance with shards: what this rank held when its group last broke
    // (Note [Regroup of shards]), and the shard groups' size the run started with.
    let sharded = cfg.sharding != Sharding::None;
    let mut local: Option<phalanx_ddp::fsdp::LocalShard<M>> = None;
    let group_size = cfg.shard_group_size.unwrap_or(pg.local_world_size());
    loop {
        let attempt = (|| -> Result<Outcome> {
            let mut options = DdpOptions::default().with_bucket_memory(cfg.bucket_memory);
            if cfg.bf16 {
                options = options.with_comm_hook(Bf16CompressHook);
            }
            let mut source = None;
            if let Some(since) = regroup {
                let took = pos.is_none();
                let from = if sharded {
                    // A replacement's template is its freshly built model; a survivor's, its
                    // own module.
                    let built = model.take();
                    let (template, mine) = match local.as_mut() {
                        Some(l) => (l.module.clone(), Some(l)),
                        None => (built.expect("a replacement builds its model"), None),
                    };
                    let (synced, at, from, state) =
                        resync_sharded(&pg, &template, mine, &mut optim, pos)?;
                    model = Some(synced);
                    local = None;
                    optim = Optim::new(cfg.optim);
                    pending_state = state;
                    pos = Some(at);
                    from
                } else {
                    let held = model.as_ref().expect("fault tolerance keeps the model");
                    let (synced, at, from) = resync(&pg, held, &mut optim, pos)?;
                    model = Some(synced);
                    pos = Some(at);
                    from
                };
                source = Some((since, from, took));
                // Every rank holds the source's state already.
                options = options.with_broadcast_params(false);
            }
            // Without fault tolerance there is one attempt, and the wrapper takes the model
            // (a kept copy would keep every parameter alive under `--sharding full`).
            let wrapped = match ft.is_some() && !sharded {
                true => model.clone(),
                false => model.take(),
            }
            .expect("the model is present before each attempt");
            // Under fault tolerance the group may have shrunk: shard groups of the run's size
            // where that divides the ranks alive, else one group of them all.
            let shard_group_size = match ft.is_some() && sharded {
                true => Some(match pg.world_size().is_multiple_of(group_size) {
                    true => group_size,
                    false => pg.world_size(),
                }),
                false => cfg.shard_group_size,
            };
            let mut par = Parallel::new(
                wrapped,
                pg.clone(),
                cfg.sharding,
                cfg.reshard_after_forward,
                shard_group_size,
                options,
            )?;
            // The optimizer state a checkpoint held: whole under DDP, this rank's pieces of
            // it under a sharded mode.
            if let Some(state) = pending_state.take() {
                if optim.has_state() {
                    par.load_optim_state(&mut optim, state)?;
                }
            }
            let mut at = pos.unwrap_or_default();
            let ft = ft.as_ref();
            let mut after_regroup = |at: Position, reporter: &mut dyn Reporter| {
                if let Some((since, from, took)) = source.take() {
                    reporter.regrouped(&Regrouped {
                        generation: ft.map_or(0, FaultTolerance::generation),
                        members: ft.map(|f| f.members().to_vec()).unwrap_or_default(),
                        source: from,
                        position: at,
                        seconds: since.elapsed().as_secs_f64(),
                        replacement: took,
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
            let result = ctx.epochs(
                &pg,
                &mut par,
                &mut optim,
                &mut at,
                &mut totals,
                reporter,
                &mut after_regroup,
                &mut boundary,
            );
            // What the last completed step left, for a regroup after a failure.
            // Only fault tolerance goes on with the model after the run of epochs (under
            // `full`, gathering it is a collective: not after a failure without it).
            if ft.is_some() {
                match sharded {
                    // No collective: the group may be broken.
                    true => local = Some(par.into_local()?),
                    false => model = Some(par.into_inner()?),
                }
            }
            pos = Some(at);
            result
        })();
        match (attempt, ft.as_mut()) {
            (Ok(Outcome::Done(summary)), ft) => {
                // A rank still joining has nothing left to do (Note [Generations]).
                if let Some(ft) = ft {
                    ft.finish(&pg)?;
                }
                return Ok(Some(summary));
            }
            (Ok(Outcome::Advance(to)), Some(ft)) => {
                let since = Instant::now();
                drop(pg);
                pg = Arc::new(ft.advance(to)?);
                pg.abort_on_panic();
                regroup = Some(since);
            }
            // A subgroup's collective (a shard group's, a replica group's) can fail before the
            // whole group learns of it: that rank breaks the group for everyone.
            (Err(e), Some(ft)) if pg.failure().is_some() || broke_a_group(&e) => {
                if pg.failure().is_none() {
                    pg.abort(&e.to_string());
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
                pg = Arc::new(ft.regroup(cause)?);
                pg.abort_on_panic();
                regroup = Some(failed_at);
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
        Error::Pg(_) | Error::Ddp(Ddp::Collective { .. } | Ddp::Sync { .. } | Ddp::Setup { .. })
    )
}

/// The seed of step `step`'s random draws: SplitMix64 of the run's seed and the step.
fn step_seed(seed: u64, step: u64) -> u64 {
    let mut z = seed
        .wrapping_add(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(step.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How a run of epochs ended.
enum Outcome {
    /// The run is complete.
    Done(Summary),
    /// Fault tolerance: every rank agreed at a step boundary to connect this generation.
    Advance(u64),
}

/// What every attempt of a run shares: the configuration and the data.
struct Context<'a> {
    cfg: &'a TrainConfig,
    facts: std::collections::HashMap<String, String>,
    train_set: Arc<Dataset>,
    test_set: Dataset,
    /// Whether the step updates each bucket as it arrives (not under fault tolerance).
    fused: bool,
    /// This process's rank in the round's first group (Note [Generations]: its slot), for
    /// reports, and that group's size: the schedule's horizon.
    slot: usize,
    slots: usize,
}

/// `--resume`: rank 0 reads the newest checkpoint that verifies (written whole, or sharded at
/// any world size: Note [Sharded checkpoints]) into `model`; the position and the whole
/// optimizer state reach every rank by broadcast, the parameters through the wrapper's
/// initial broadcast. Returns the position and the optimizer state, which the caller loads
/// once the model is wrapped (under a sharded mode each rank keeps its pieces of it). Without
/// `--resume`: the start.
fn resume_from_disk<M: Classifier>(
    pg: &ProcessGroup,
    cfg: &TrainConfig,
    facts: &std::collections::HashMap<String, String>,
    model: &mut M,
    reporter: &mut dyn Reporter,
) -> Result<(Position, Option<Vec<u8>>)> {
    let rank = pg.rank();
    let world = pg.world_size() as u64;
    let start = Position {
        world,
        ..Position::default()
    };
    if !cfg.resume {
        return Ok((start, None));
    }
    let mut handover = Handover::default();
    let mut optim_state = None;
    let mut resumed_meta = None;
    if rank == 0 {
        let dir = cfg
            .checkpoint_dir
            .as_ref()
            .ok_or_else(|| Error::Config("--resume needs --checkpoint-dir".into()))?;
        let newest = checkpoint::load_newest_intact(dir)?;
        for d in &newest.damaged {
            reporter.checkpoint_skipped(d);
        }
        if newest.checkpoint.is_none() {
            reporter.nothing_to_resume(dir);
        }
        if let Some(ck) = newest.checkpoint {
            snapshot::check_compatible(&ck.meta, facts, cfg)?;
            let path = checkpoint::record_path(dir, ck.meta.global_step);
            *model = checkpoint::state_dict::load_module(model.clone(), &ck, &path)?;
            handover = Handover {
                position: Some(ck.meta.position()),
                optim_bytes: ck.optim_state.as_ref().map(Vec::len),
            };
            optim_state = ck.optim_state;
            resumed_meta = Some(ck.meta);
        }
    }
    let handover = handover.broadcast(pg, 0)?;
    // The momentum buffers reach every rank from rank 0, like the parameters.
    let state = handover.broadcast_optim_state(pg, 0, optim_state)?;
    if let Some(m) = &resumed_meta {
        reporter.resumed(m);
    }
    let Some(at) = handover.position else {
        return Ok((start, None));
    };
    let has_state = Optim::new(cfg.optim).has_state();
    if handover.optim_bytes.is_none() && has_state && rank == 0 {
        tracing::warn!(
            "--resume: the checkpoint holds no optimizer state (written before its first step, \
             or by an older phalanx); the {} state restarts from zero",
            cfg.optim.kind
        );
    }
    Ok((at, state))
}

impl Context<'_> {
    /// Ends the run at `at`, the step every rank agreed to stop after (Note [Stop agreement]):
    /// commits that step's checkpoint unless `saved` (the step's own was just written), waits
    /// until it is committed on every rank, and returns [`Error::Stopped`] naming it.
    #[allow(clippy::too_many_arguments)]
    fn stop_at<M: Classifier>(
        &self,
        pg: &ProcessGroup,
        par: &Parallel<M>,
        optim: &Optim,
        at: Position,
        signal: i32,
        saved: bool,
        reporter: &mut dyn Reporter,
    ) -> Result<Error> {
        if !saved {
            snapshot::save(pg, self.cfg, par, optim, &self.facts, at, reporter)?;
        }
        // Under DDP rank 0 alone writes: no rank exits (and no launcher reports the job over)
        // before the commit.
        pg.barrier()?;
        Ok(Error::Stopped {
            signal,
            global_step: at.global_step,
            checkpoint: self
                .cfg
                .checkpoint_dir
                .as_deref()
                .map(|d| checkpoint::record_path(d, at.global_step)),
        })
    }

    /// Trains from `at` to the end of the run, keeping `at` at the last completed step.
    #[allow(clippy::too_many_arguments)]
    fn epochs<M: Classifier>(
        &self,
        pg: &ProcessGroup,
        par: &mut Parallel<M>,
        optim: &mut Optim,
        at: &mut Position,
        totals: &mut Totals,
        reporter: &mut dyn Reporter,
        after_regroup: &mut dyn FnMut(Position, &mut dyn Reporter),
        boundary: &mut dyn FnMut(&ProcessGroup) -> Result<Option<u64>>,
    ) -> Result<Outcome> {
        let cfg = self.cfg;
        let (rank, world) = (pg.rank(), pg.world_size());
        // The data, the gradients and the test set are split among the ranks alive; a change
        // of them mid-epoch re-shards the rest of the epoch (Note [Sampler position]).
        let (slot, slots) = (self.slot, self.slots);
        let train_set = &self.train_set;
        // The schedule's horizon: all epochs at this world's steps per epoch (DistributedSampler
        // pads every rank's share to ceil(len / world)). Not --max-steps: a run stopped early
        // follows the same schedule as the full run, so that resuming it continues that schedule.
        let steps_per_epoch = train_set.len().div_ceil(slots).div_ceil(cfg.batch_size) as u64;
        let total_steps = steps_per_epoch * cfg.epochs;
        let test = &self.test_set;
        let shard = exact_shard(test.len(), world, rank)?;
        let test_x = &test.features()[shard.start * test.dim()..shard.end * test.dim()];
        let test_y = &test.labels()[shard];
        totals.epochs_done = totals.epochs_done.max(at.epoch);
        let mut stop_check = StopCheck::new();
        'epochs: for epoch in at.epoch..cfg.epochs {
            let first = epoch == at.epoch && at.is_mid_epoch();
            let (skip, step0) = if first {
                (at.samples_in_epoch as usize, at.step_in_epoch)
            } else {
                totals.epoch_loss = (0.0, 0, 0);
                (0, 0)
            };
            let indices = position::epoch_indices(
                train_set.len(),
                world,
                rank,
                cfg.seed,
                epoch,
                skip,
                if first {
                    (at.world as usize).max(1)
                } else {
                    world
                },
            )?;
            let steps_total = indices.len().div_ceil(cfg.batch_size) as u64 + step0;
            let mut step_in_epoch = step0;
            let mut samples_in_epoch = skip;
            let loader = DataLoader::new(train_set.clone(), indices, cfg.batch_size)?;
            let (epoch_start, wait_start) = (Instant::now(), par.stats().wait);
            for batch in loader.iter() {
                optim.schedule_step(at.global_step, steps_per_epoch, total_steps);
                // Every step's random draws (dropout) from the step's own seed, the same on
                // every rank and under every sharding mode (Note [Block seeds] in phalanx-ddp),
                // so that a resumed run draws what the uninterrupted one did.
                seed_step(&device(), step_seed(cfg.seed, at.global_step));
                let loss = {
                    let _s = trace::span("step", "compute").arg("step", at.global_step);
                    let kind = match cfg.grad_clip {
                        Some(max) => StepKind::Clipped(max),
                        None if self.fused => StepKind::Fused,
                        None => StepKind::Unfused,
                    };
                    par.step(optim, &batch.features, &batch.labels, kind)?
                };
                if !loss.is_finite() {
                    return Err(Error::Config(format!(
                        "loss became {loss} at epoch {} step {}: lower --lr",
                        epoch + 1,
                        step_in_epoch + 1
                    )));
                }
                step_in_epoch += 1;
                samples_in_epoch += batch.labels.len() * world;
                *at = Position {
                    epoch,
                    step_in_epoch,
                    global_step: at.global_step + 1,
                    samples_in_epoch: samples_in_epoch as u64,
                    world: world as u64,
                };
                after_regroup(*at, reporter);
                let (sum, n, samples) = &mut totals.epoch_loss;
                *sum += loss as f64;
                *n += 1;
                *samples += batch.labels.len();
                reporter.step(epoch, step_in_epoch, steps_total, loss);
                let saved = cfg.checkpoint_every > 0
                    && at.global_step.is_multiple_of(cfg.checkpoint_every)
                    && step_in_epoch < steps_total;
                if saved {
                    snapshot::save(pg, cfg, par, optim, &self.facts, *at, reporter)?;
                }
                if cfg.max_steps.is_some_and(|m| at.global_step >= m) {
                    totals.train_time += epoch_start.elapsed();
                    totals.train_samples += totals.epoch_loss.2;
                    totals.comm_wait += par.stats().wait - wait_start;
                    totals.epochs_done = epoch;
                    break 'epochs;
                }
                // Note [Stop agreement]: an epoch's last step agrees after the epoch instead.
                if step_in_epoch < steps_total && stop_check.due(at.global_step) {
                    if let Some(signal) = stop_check.agree(pg, at.global_step)? {
                        return Err(self.stop_at(pg, par, optim, *at, signal, saved, reporter)?);
                    }
                }
                if let Some(to) = boundary(pg)? {
                    totals.train_time += epoch_start.elapsed();
                    totals.comm_wait += par.stats().wait - wait_start;
                    return Ok(Outcome::Advance(to));
                }
            }
            let epoch_time = epoch_start.elapsed();
            let (loss_sum, loss_n, epoch_samples) = totals.epoch_loss;
            let wait = par.stats().wait - wait_start;
            // Evaluation on exact shards; counts summed over ranks (no padded duplicates).
            let correct = evaluate(par.whole()?, test_x, test_y)?;
            par.release();
            let mut counts = [correct as i64, test_y.len() as i64];
            pg.allreduce(&mut counts, ReduceOp::Sum)?;
            let mut stats = [
                if loss_n > 0 {
                    loss_sum / loss_n as f64
                } else {
                    0.0
                },
                epoch_samples as f64,
                epoch_time.as_secs_f64(),
                wait.as_secs_f64() / epoch_time.as_secs_f64().max(1e-9),
            ];
            pg.allreduce(&mut stats, ReduceOp::Avg)?;
            // Counted once the epoch's collectives are through: a regroup repeats them.
            totals.train_time += epoch_time;
            totals.train_samples += epoch_samples;
            totals.comm_wait += wait;
            totals.last_accuracy = counts[0] as f64 / counts[1].max(1) as f64;
            let record = EpochRecord {
                epoch: epoch + 1,
                train_loss: stats[0],
                test_accuracy: totals.last_accuracy,
                samples_per_s: stats[1] * world as f64 / stats[2].max(1e-9),
                comm_fraction: stats[3],
                seconds: stats[2],
            };
            reporter.epoch(&record);
            totals.records.push(record);
            totals.epochs_done = epoch + 1;
            *at = Position {
                epoch: epoch + 1,
                step_in_epoch: 0,
                global_step: at.global_step,
                samples_in_epoch: 0,
                world: world as u64,
            };
            snapshot::save(pg, cfg, par, optim, &self.facts, *at, reporter)?;
            if stop::armed() && epoch + 1 < cfg.epochs {
                if let Some(signal) = stop_check.agree(pg, at.global_step)? {
                    return Err(self.stop_at(pg, par, optim, *at, signal, true, reporter)?);
                }
            }
        }
        let train_secs = totals.train_time.as_secs_f64().max(1e-9);
        Ok(Outcome::Done(Summary {
            rank: slot,
            world,
            epochs: totals.epochs_done,
            test_accuracy: totals.last_accuracy,
            samples_per_s: totals.train_samples as f64 * world as f64 / train_secs,
            comm_fraction: totals.comm_wait.as_secs_f64() / train_secs,
            param_digest: par.digest()?,
            records: totals.records.clone(),
        }))
    }
}
