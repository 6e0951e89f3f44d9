//! One attempt of a run: the epochs over any engine ([`DataParallel`]), from a position to
//! the end of the run, a stop, or a change of the group; what a finished run reports.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use phalanx_checkpoint as checkpoint;
use phalanx_checkpoint::position::{self, Position};
use phalanx_core::{trace, ReduceOp};
use phalanx_data::{exact_shard, DataLoader, Dataset};
use phalanx_ddp::{
    fsdp::seed_step,
    outer::{DiLoCo, OuterState},
    DataParallel, Local, StepKind,
};
use phalanx_pg::ProcessGroup;

use super::{island_checkpoint, regroup::Previous};
use crate::{
    config::{Reporter, TrainConfig},
    device,
    metrics::EpochRecord,
    model_parallel::ModelParallel,
    parallel::{self, WithEngine},
    score, snapshot,
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
    /// Final mean test loss (a language model's validation loss); NaN before any evaluation.
    pub test_loss: f64,
    /// Mean training loss over the last epoch, or over the steps of it run when
    /// `--max-steps` ended the run, averaged over the ranks (the global batch's mean loss).
    pub train_loss: f64,
    /// Training throughput over the run, all ranks together.
    pub samples_per_s: f64,
    /// Share of training time blocked on gradient communication.
    pub comm_fraction: f64,
    /// SHA-256 of this rank's final parameters in canonical order.
    pub param_digest: String,
    /// Under `--pp`: the pipeline's bubble, measured and in theory (Note [The measured bubble]
    /// in `pipeline/bubble.rs`).
    pub pipeline_bubble: Option<crate::pipeline::Bubble>,
    /// Under `--outer`: what the outer syncs cost this rank.
    pub outer: Option<phalanx_ddp::outer::OuterStats>,
    /// Per-epoch records.
    pub records: Vec<EpochRecord>,
}

/// Figures summed over the run, kept across a regroup.
#[derive(Default)]
pub(super) struct Totals {
    pub(super) records: Vec<EpochRecord>,
    pub(super) train_time: Duration,
    pub(super) train_samples: usize,
    pub(super) comm_wait: Duration,
    pub(super) last_accuracy: f64,
    pub(super) last_test_loss: Option<f64>,
    pub(super) epochs_done: u64,
    /// The epoch in progress: its loss sum and count and samples, kept by a survivor of a
    /// regroup (a replacement starts them at zero).
    pub(super) epoch_loss: (f64, usize, usize),
}

/// How a run of epochs ended.
pub(super) enum Outcome {
    /// The run is complete.
    Done(Summary),
    /// Fault tolerance: every rank agreed at a step boundary to connect this generation.
    Advance(u64),
}

/// What every attempt of a run shares: the configuration and the data.
pub(super) struct Context<'a> {
    pub(super) cfg: &'a TrainConfig,
    pub(super) facts: std::collections::HashMap<String, String>,
    pub(super) train_set: Arc<Dataset>,
    pub(super) test_set: Dataset,
    /// Whether the step updates each bucket as it arrives (not under fault tolerance).
    pub(super) fused: bool,
    /// This process's rank in the round's first group (Note [FT generations]: its slot), for
    /// reports, and that group's size: the schedule's horizon.
    pub(super) slot: usize,
    pub(super) slots: usize,
    /// Under `--tp` or `--pp`: the run's mesh and this rank's part of the model (Note
    /// [Tensor-parallel run], Note [Pipeline run]).
    pub(super) mp: Option<ModelParallel>,
    /// Under `--outer`: the data, the test set and the figures are split over the whole
    /// group while the engine runs on this rank's island (Note [Islands run]).
    pub(super) islands: bool,
    /// Whether each step keeps what the rank held before its update (fault tolerance under a
    /// cut model: Note [Replicas that leave and join]).
    pub(super) keep_previous: bool,
}

/// One attempt's run of epochs, handed the model in its engine ([`WithEngine`]).
pub(super) struct Attempt<'a, 'r> {
    pub(super) ctx: &'a Context<'a>,
    /// The engine's group, and the whole group of this generation.
    pub(super) pg: &'a ProcessGroup,
    pub(super) world: &'a ProcessGroup,
    pub(super) optim: &'a mut Optim,
    /// The optimizer state a checkpoint held, loaded into the engine's optimizer first.
    pub(super) pending_state: &'a mut Option<Vec<u8>>,
    /// Where the run starts.
    pub(super) at: Position,
    pub(super) totals: &'a mut Totals,
    pub(super) reporter: &'a mut (dyn Reporter + 'r),
    pub(super) after_regroup: &'a mut dyn FnMut(Position, &mut dyn Reporter),
    pub(super) boundary: &'a mut dyn FnMut(&ProcessGroup) -> Result<Option<u64>>,
    /// Whether the model is kept after the run (fault tolerance goes on with it).
    pub(super) keep: bool,
    /// Under `--outer`: the outer optimizer across the islands, and what it starts from
    /// after a regroup (what this rank held, and whether its island took its inner state
    /// from another island: Note [Islands that leave and join] in phalanx-ddp).
    pub(super) outer: Option<&'a mut DiLoCo>,
    pub(super) outer_start: (Option<OuterState>, bool),
}

impl<M: Classifier> WithEngine<M> for Attempt<'_, '_> {
    /// Where the run got to, how it ended, what this rank holds of the model when kept (read
    /// without a collective: after a failure the group may be broken), and what it held
    /// before its last step's update where the context keeps that.
    type Output = Result<(
        Position,
        Result<Outcome>,
        Option<Local<M>>,
        Option<Previous<M>>,
    )>;

    fn run<E: DataParallel<M>>(self, mut engine: E) -> Self::Output {
        // The optimizer state a checkpoint held: whole, or this rank's pieces of it where the
        // engine shards the parameters.
        if let Some(state) = self.pending_state.take() {
            if self.optim.has_state() {
                parallel::load_optim_state(&engine, self.optim, state)?;
            }
        }
        // A pipeline runs each block once per microbatch: fully sharded blocks sum their
        // gradients over the step's microbatches and keep their parameters gathered for it
        // (Note [Microbatched units] in phalanx-ddp); other engines have nothing to do.
        if self
            .ctx
            .mp
            .as_ref()
            .is_some_and(ModelParallel::microbatched)
        {
            engine.set_requires_gradient_sync(false);
            engine.set_reshard_after_backward(false);
        }
        let mut at = self.at;
        let mut outer = self.outer;
        if let Some(outer) = outer.as_deref_mut() {
            let (state, fresh) = self.outer_start;
            // A sync its group failed in runs in this one.
            let healed = outer
                .heal(&mut engine, state, fresh, self.at.global_step)
                .and_then(|()| outer.settle(&mut engine).map(drop));
            // A heal or a sync that fails (a second death) leaves the engine as it was: the
            // rank keeps what it holds, as after a failed step, and regroups again.
            if let Err(e) = healed {
                let kept = match self.keep {
                    true => Some(engine.into_local()?),
                    false => None,
                };
                return Ok((at, Err(crate::Error::from(e)), kept, None));
            }
        }
        let mut previous = None;
        let result = self.ctx.epochs(
            (self.pg, self.world),
            &mut engine,
            (self.optim, &mut previous),
            &mut at,
            self.totals,
            self.reporter,
            self.after_regroup,
            self.boundary,
            outer,
        );
        let kept = match self.keep {
            true => Some(engine.into_local()?),
            false => None,
        };
        Ok((at, result, kept, previous))
    }
}

impl Context<'_> {
    /// The group every rank of the run is in: `pg` (the engine's), or the whole world under a
    /// cut model, whose data-parallel groups must stop at the same step as each other (a stop
    /// writes every piece: a collective of the world).
    fn everyone<'a>(
        &'a self,
        (pg, world): (&'a ProcessGroup, &'a ProcessGroup),
    ) -> &'a ProcessGroup {
        self.mp
            .as_ref()
            .map_or_else(|| self.data_group((pg, world)), |mp| mp.world())
    }

    /// The group the data, the test set and the epoch's figures are split over: the engine's,
    /// or the whole group when the engine runs on an island (Note [Islands run]).
    fn data_group<'a>(
        &self,
        (pg, world): (&'a ProcessGroup, &'a ProcessGroup),
    ) -> &'a ProcessGroup {
        match self.islands {
            true => world,
            false => pg,
        }
    }

    /// Writes the run's checkpoint at `at`, if it has a `--checkpoint-dir` (a collective). In
    /// islands (`outer`), every rank's island file first, then island 0's checkpoint, whose
    /// record (rank 0's) commits them all (Note [Island checkpoints]).
    #[allow(clippy::too_many_arguments)]
    fn save<M: Classifier, E: DataParallel<M>>(
        &self,
        (pg, whole): (&ProcessGroup, &ProcessGroup),
        par: &mut E,
        optim: &Optim,
        at: Position,
        outer: Option<&DiLoCo>,
        reporter: &mut dyn Reporter,
    ) -> Result<()> {
        let mp = self.mp.as_ref();
        let (Some(outer), Some(dir)) = (outer, self.cfg.checkpoint_dir.as_ref()) else {
            return snapshot::save(pg, mp, self.cfg, par, optim, &self.facts, at, reporter);
        };
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Config(format!("--checkpoint-dir {}: {e}", dir.display())))?;
        let snapshot = outer.snapshot();
        let flags = island_checkpoint::outer_flags(outer.options());
        let at_rank = (at.global_step, whole.rank(), whole.world_size());
        let island = island_checkpoint::IslandState::of(par, optim)?;
        island_checkpoint::save(dir, at_rank, &flags, &island, &snapshot)?;
        whole.barrier()?;
        // The engine's group is the island: island 0's rank 0 writes the whole model, or
        // island 0's ranks their shards.
        match outer.island_index().0 {
            0 => snapshot::save(pg, mp, self.cfg, par, optim, &self.facts, at, reporter),
            _ => Ok(()),
        }
    }

    /// Ends the run at `at`, the step every rank agreed to stop after (Note [Stop agreement]):
    /// commits that step's checkpoint unless `saved` (the step's own was just written), waits
    /// until it is committed on every rank, and returns [`Error::Stopped`] naming it.
    #[allow(clippy::too_many_arguments)]
    fn stop_at<M: Classifier, E: DataParallel<M>>(
        &self,
        (pg, world): (&ProcessGroup, &ProcessGroup),
        par: &mut E,
        optim: &Optim,
        at: Position,
        signal: i32,
        (saved, outer): (bool, Option<&DiLoCo>),
        reporter: &mut dyn Reporter,
    ) -> Result<Error> {
        if !saved {
            self.save((pg, world), par, optim, at, outer, reporter)?;
        }
        // Under DDP rank 0 alone writes: no rank exits (and no launcher reports the job over)
        // before the commit (of every piece of a cut model: over the whole world).
        self.everyone((pg, world)).barrier()?;
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
    fn epochs<M: Classifier, E: DataParallel<M>>(
        &self,
        (pg, whole): (&ProcessGroup, &ProcessGroup),
        par: &mut E,
        (optim, previous): (&mut Optim, &mut Option<Previous<M>>),
        at: &mut Position,
        totals: &mut Totals,
        reporter: &mut dyn Reporter,
        after_regroup: &mut dyn FnMut(Position, &mut dyn Reporter),
        boundary: &mut dyn FnMut(&ProcessGroup) -> Result<Option<u64>>,
        mut outer: Option<&mut DiLoCo>,
    ) -> Result<Outcome> {
        let cfg = self.cfg;
        // The engine's group and the whole generation's.
        let g = (pg, whole);
        let data = self.data_group(g);
        let (rank, world) = (data.rank(), data.world_size());
        // The outer syncs' time counts as communication, as the engine's waits do.
        let outer_wait = |outer: &Option<&mut DiLoCo>| {
            outer
                .as_ref()
                .map_or(Default::default(), |o| o.stats().wait)
        };
        // The data, the gradients and the test set are split among the ranks alive; a change
        // of them mid-epoch re-shards the rest of the epoch (Note [Sampler position]).
        let (slot, slots) = (self.slot, self.slots);
        let train_set = &self.train_set;
        // The schedule's horizon: all epochs at this world's steps per epoch (DistributedSampler
        // pads every rank's share to ceil(len / world)). Not --max-steps: a run stopped early
        // follows the same schedule as the full run, so that resuming it continues that schedule.
        // Under --tp the data is split over the "dp" group: the first group's replicas.
        let horizon = match &self.mp {
            Some(mp) => slots / mp.size(),
            None => slots,
        };
        let steps_per_epoch = train_set.len().div_ceil(horizon).div_ceil(cfg.batch_size) as u64;
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
            let (epoch_start, wait_start) = (Instant::now(), par.stats().wait + outer_wait(&outer));
            for batch in loader.iter() {
                if self.keep_previous {
                    // The update replaces every tensor: this keeps one more copy of the piece.
                    *previous = Some(Previous {
                        at: *at,
                        model: par.module().clone(),
                        optim: optim.clone(),
                        epoch_loss: totals.epoch_loss,
                    });
                }
                optim.schedule_step(at.global_step, steps_per_epoch, total_steps);
                // Every step's random draws (dropout) from the step's own seed, the same on
                // every rank and under every sharding mode (Note [Block seeds] in phalanx-ddp),
                // so that a resumed run draws what the uninterrupted one did.
                let seed = step_seed(cfg.seed, at.global_step);
                seed_step(&device(), seed);
                let loss = {
                    let _s = trace::span("step", "compute").arg("step", at.global_step);
                    let kind = match cfg.grad_clip {
                        Some(max) => StepKind::Clipped(max),
                        None if self.fused => StepKind::Fused,
                        None => StepKind::Unfused,
                    };
                    match &self.mp {
                        Some(mp) => parallel::step_with(par, optim, kind, |model| {
                            mp.forward_backward(model, &batch.features, &batch.labels, seed)
                        })?,
                        None => parallel::step(par, optim, &batch.features, &batch.labels, kind)?,
                    }
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
                // The step is done before its outer sync: a group that fails in the sync
                // leaves it owed, not the step undone (Note [Islands that leave and join]).
                let last = cfg.max_steps.is_some_and(|m| at.global_step + 1 >= m)
                    || (epoch + 1 == cfg.epochs && step_in_epoch == steps_total);
                *at = Position {
                    epoch,
                    step_in_epoch,
                    global_step: at.global_step + 1,
                    samples_in_epoch: samples_in_epoch as u64,
                    world: world as u64,
                };
                let mut synced = false;
                if let Some(outer) = outer.as_deref_mut() {
                    let _s = trace::span("outer sync", "comm");
                    synced = outer.step(par)?;
                    // The run's last step ends on the global parameters, whatever the count.
                    if last && outer.is_apart() {
                        outer.sync(par)?;
                    }
                }
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
                    self.save(g, par, optim, *at, outer.as_deref(), reporter)?;
                }
                if cfg.max_steps.is_some_and(|m| at.global_step >= m) {
                    totals.train_time += epoch_start.elapsed();
                    totals.train_samples += totals.epoch_loss.2;
                    totals.comm_wait += par.stats().wait + outer_wait(&outer) - wait_start;
                    totals.epochs_done = epoch;
                    // The summary's test figures are the model's as it ends, not an older
                    // epoch's.
                    (totals.last_accuracy, totals.last_test_loss) =
                        test_score(data, self.mp.as_ref(), par, test_x, test_y)?;
                    break 'epochs;
                }
                // Note [Stop agreement]: an epoch's last step agrees after the epoch instead.
                if step_in_epoch < steps_total && stop_check.due(at.global_step) {
                    if let Some(signal) = stop_check.agree(self.everyone(g), at.global_step)? {
                        let how = (saved, outer.as_deref());
                        return Err(self.stop_at(g, par, optim, *at, signal, how, reporter)?);
                    }
                }
                // Under islands the ranks meet only in outer syncs: a new generation is agreed
                // on there, over the whole group (Note [Whole blocks] in phalanx-pg); a cut
                // model's ranks agree over the world, which also keeps them within one step of
                // each other (Note [Replicas that leave and join]).
                let boundary_group = match outer {
                    Some(_) => synced.then_some(data),
                    None => Some(self.everyone(g)),
                };
                if let Some(to) = boundary_group.map(&mut *boundary).transpose()?.flatten() {
                    totals.train_time += epoch_start.elapsed();
                    totals.comm_wait += par.stats().wait + outer_wait(&outer) - wait_start;
                    return Ok(Outcome::Advance(to));
                }
            }
            let epoch_time = epoch_start.elapsed();
            let (loss_sum, loss_n, epoch_samples) = totals.epoch_loss;
            let wait = par.stats().wait + outer_wait(&outer) - wait_start;
            let (accuracy, test_loss) = test_score(data, self.mp.as_ref(), par, test_x, test_y)?;
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
            data.allreduce(&mut stats, ReduceOp::Avg)?;
            // Counted once the epoch's collectives are through: a regroup repeats them.
            totals.train_time += epoch_time;
            totals.train_samples += epoch_samples;
            totals.comm_wait += wait;
            (totals.last_accuracy, totals.last_test_loss) = (accuracy, test_loss);
            let record = EpochRecord {
                epoch: epoch + 1,
                train_loss: stats[0],
                test_accuracy: accuracy,
                test_loss: test_loss.unwrap_or(f64::NAN),
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
            self.save(g, par, optim, *at, outer.as_deref(), reporter)?;
            if stop::armed() && epoch + 1 < cfg.epochs {
                if let Some(signal) = stop_check.agree(self.everyone(g), at.global_step)? {
                    let how = (true, outer.as_deref());
                    return Err(self.stop_at(g, par, optim, *at, signal, how, reporter)?);
                }
            }
        }
        if let Some(outer) = outer.as_deref_mut() {
            // A run whose group failed in its end-of-run sync, or that took fresh islands at
            // its last step, ends here on the global parameters.
            outer.end(par)?;
        }
        let train_secs = totals.train_time.as_secs_f64().max(1e-9);
        // The last epoch's mean loss; after --max-steps, that of the steps run of it (every
        // rank stops at the same step, so every rank is here for the collective).
        let train_loss = match (cfg.max_steps.is_some(), totals.records.last()) {
            (false, Some(last)) => last.train_loss,
            _ => {
                let (sum, n, _) = totals.epoch_loss;
                let mut mean = [if n > 0 { sum / n as f64 } else { f64::NAN }];
                data.allreduce(&mut mean, ReduceOp::Avg)?;
                mean[0]
            }
        };
        Ok(Outcome::Done(Summary {
            rank: slot,
            // Every rank of the run: the data-parallel ranks times a model replica's.
            world: world * self.mp.as_ref().map_or(1, ModelParallel::size),
            epochs: totals.epochs_done,
            test_accuracy: totals.last_accuracy,
            test_loss: totals.last_test_loss.unwrap_or(f64::NAN),
            train_loss,
            samples_per_s: totals.train_samples as f64 * world as f64 / train_secs,
            comm_fraction: totals.comm_wait.as_secs_f64() / train_secs,
            param_digest: match &self.mp {
                None => parallel::digest(par)?,
                Some(mp) => {
                    let mine = par.full_params()?;
                    let mut hasher = crate::step::ParamHasher::default();
                    mp.for_each_whole(par.module(), mine, &mut |t| hasher.update(t))?;
                    hasher.finish()
                }
            },
            pipeline_bubble: match &self.mp {
                Some(mp) => mp.bubble()?,
                None => None,
            },
            outer: outer.map(|o| o.stats()),
            records: totals.records.clone(),
        }))
    }
}

/// The test accuracy and mean test loss (`None` with no test targets) of the model, evaluated
/// on this rank's exact shard of the test set, the sums reduced over the ranks (no padded
/// duplicates).
fn test_score<M: Classifier, E: DataParallel<M>>(
    pg: &ProcessGroup,
    mp: Option<&ModelParallel>,
    par: &mut E,
    x: &[f32],
    y: &[i64],
) -> Result<(f64, Option<f64>)> {
    let score = match mp {
        Some(mp) => mp.score(par.unshard()?, x, y)?,
        None => score(par.unshard()?, x, y)?,
    };
    par.reshard();
    let mut sums = [score.correct as f64, score.targets as f64, score.loss_sum];
    pg.allreduce(&mut sums, ReduceOp::Sum)?;
    let [correct, targets, loss_sum] = sums;
    let test_loss = (targets > 0.0).then(|| loss_sum / targets);
    Ok((correct / targets.max(1.0), test_loss))
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
