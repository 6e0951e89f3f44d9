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
use phalanx_ddp::{Bf16CompressHook, DdpOptions, DistributedDataParallel};
use phalanx_pg::ProcessGroup;

pub use crate::config::{Reporter, TrainConfig};
use crate::{
    checkpoint, device, evaluate,
    metrics::EpochRecord,
    model::{freeze_matching, with_model, ModelSpec, WithModel},
    param_digest, position, snapshot, train_step, train_step_clipped, Classifier, Error, Optim,
    Result,
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
        pg,
        cfg,
        reporter,
        full,
    };
    with_model(&spec, &device(), run)
}

/// The rest of [`train`], for the model it built.
struct Run<'a> {
    pg: Arc<ProcessGroup>,
    cfg: &'a TrainConfig,
    reporter: &'a mut dyn Reporter,
    full: Dataset,
}

impl WithModel for Run<'_> {
    type Output = Result<Summary>;

    fn run<M: Classifier>(self, model: M) -> Result<Summary> {
        train_model(self.pg, self.cfg, self.reporter, &self.full, model)
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
    let (rank, world) = (pg.rank(), pg.world_size());
    let (train_set, test_set) = full.split(cfg.test_fraction, cfg.seed)?;
    let train_set = Arc::new(train_set);
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
        if rank == 0 {
            tracing::info!(frozen = paths.len(), "--freeze: {}", paths.join(", "));
        }
        model = frozen;
    }
    let facts = snapshot::run_facts(cfg, full);

    // Resume: rank 0 reads the checkpoint; its parameters reach every rank through DDP's
    // initial broadcast, the position through one small broadcast.
    // found, epoch, step_in_epoch, global_step, samples_in_epoch|prev_world<<40, optimizer-state
    // bytes (-1: none).
    let mut pos = [0i64, 0, 0, 0, 0, -1];
    let mut resumed_meta = None;
    let mut optim_state = Vec::new();
    if cfg.resume && rank == 0 {
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
            snapshot::check_compatible(&ck.meta, &facts, cfg)?;
            model = snapshot::load_params(model, &ck)?;
            pos = [
                1,
                ck.meta.epoch as i64,
                ck.meta.step_in_epoch as i64,
                ck.meta.global_step as i64,
                (ck.meta.samples_in_epoch as i64) | ((ck.meta.world_size as i64) << 40),
                ck.optim_state.as_ref().map_or(-1, |s| s.len() as i64),
            ];
            optim_state = ck.optim_state.unwrap_or_default();
            resumed_meta = Some(ck.meta);
        }
    }
    if cfg.resume {
        pg.broadcast(&mut pos, 0)?;
        // The momentum buffers reach every rank from rank 0, like the parameters.
        if pos[5] > 0 {
            optim_state.resize(pos[5] as usize, 0);
            pg.broadcast(&mut optim_state, 0)?;
        }
    }
    if let Some(m) = &resumed_meta {
        reporter.resumed(m);
    }
    let mut optim = Optim::new(cfg.optim);
    let resumed_without_state = pos[0] == 1 && pos[5] < 0;
    if resumed_without_state && optim.has_state() && rank == 0 {
        tracing::warn!(
            "--resume: the checkpoint holds no optimizer state (written before its first step, \
             or by an older phalanx); the {} state restarts from zero",
            cfg.optim.kind
        );
    }
    let (start_epoch, start_step, mut global_step) = (pos[1] as u64, pos[2] as u64, pos[3] as u64);
    let (skip_samples, prev_world) = ((pos[4] & ((1 << 40) - 1)) as usize, (pos[4] >> 40) as usize);

    let mut options = DdpOptions::default().with_bucket_memory(cfg.bucket_memory);
    if cfg.bf16 {
        options = options.with_comm_hook(Bf16CompressHook);
    }
    let mut ddp = DistributedDataParallel::new(model, pg.clone(), options)?;
    if pos[5] > 0 && optim.has_state() {
        optim
            .load_state(optim_state)
            .map_err(|e| Error::Config(format!("the checkpoint's optimizer state: {e}")))?;
    }
    // The schedule's horizon: all epochs at this world's steps per epoch (DistributedSampler
    // pads every rank's share to ceil(len / world)). Not --max-steps: a run stopped early
    // follows the same schedule as the full run, so that resuming it continues that schedule.
    let steps_per_epoch = train_set.len().div_ceil(world).div_ceil(cfg.batch_size) as u64;
    let total_steps = steps_per_epoch * cfg.epochs;
    let shard = exact_shard(test_set.len(), world, rank)?;
    let test_x = &test_set.features()[shard.start * test_set.dim()..shard.end * test_set.dim()];
    let test_y = &test_set.labels()[shard.clone()];

    let mut records = Vec::new();
    let (mut train_time, mut train_samples, mut comm_wait) =
        (Duration::ZERO, 0usize, Duration::ZERO);
    let mut last_accuracy = 0.0;
    let mut epochs_done = start_epoch;
    'epochs: for epoch in start_epoch..cfg.epochs {
        let first = epoch == start_epoch && (skip_samples > 0 || start_step > 0);
        let indices = position::epoch_indices(
            train_set.len(),
            world,
            rank,
            cfg.seed,
            epoch,
            if first { skip_samples } else { 0 },
            if first { prev_world.max(1) } else { world },
        )?;
        let steps_total =
            indices.len().div_ceil(cfg.batch_size) as u64 + if first { start_step } else { 0 };
        let mut step_in_epoch = if first { start_step } else { 0 };
        let mut samples_in_epoch = if first { skip_samples } else { 0 };
        let loader = DataLoader::new(train_set.clone(), indices, cfg.batch_size)?;
        let (epoch_start, wait_start) = (Instant::now(), ddp.stats().wait);
        let (mut loss_sum, mut loss_n, mut epoch_samples) = (0.0f64, 0usize, 0usize);
        for batch in loader.iter() {
            optim.schedule_step(global_step, steps_per_epoch, total_steps);
            let loss = {
                let _s = trace::span("step", "compute").arg("step", global_step);
                match cfg.grad_clip {
                    Some(max) => {
                        train_step_clipped(
                            &mut ddp,
                            &mut optim,
                            &batch.features,
                            &batch.labels,
                            max,
                        )?
                        .0
                    }
                    None => train_step(&mut ddp, &mut optim, &batch.features, &batch.labels)?,
                }
            };
            if !loss.is_finite() {
                return Err(Error::Config(format!(
                    "loss became {loss} at epoch {} step {}: lower --lr",
                    epoch + 1,
                    step_in_epoch + 1
                )));
            }
            loss_sum += loss as f64;
            loss_n += 1;
            epoch_samples += batch.labels.len();
            step_in_epoch += 1;
            global_step += 1;
            samples_in_epoch += batch.labels.len() * world;
            reporter.step(epoch, step_in_epoch, steps_total, loss);
            if cfg.checkpoint_every > 0
                && global_step % cfg.checkpoint_every == 0
                && step_in_epoch < steps_total
            {
                snapshot::save(
                    &pg,
                    cfg,
                    &ddp,
                    &optim,
                    &facts,
                    [epoch, step_in_epoch, global_step, samples_in_epoch as u64],
                    reporter,
                )?;
            }
            if cfg.max_steps.is_some_and(|m| global_step >= m) {
                train_time += epoch_start.elapsed();
                train_samples += epoch_samples;
                comm_wait += ddp.stats().wait - wait_start;
                epochs_done = epoch;
                break 'epochs;
            }
        }
        let epoch_time = epoch_start.elapsed();
        train_time += epoch_time;
        train_samples += epoch_samples;
        let wait = ddp.stats().wait - wait_start;
        comm_wait += wait;
        // Evaluation on exact shards; counts summed over ranks (no padded duplicates).
        let correct = evaluate(ddp.module(), test_x, test_y)?;
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
        last_accuracy = counts[0] as f64 / counts[1].max(1) as f64;
        let record = EpochRecord {
            epoch: epoch + 1,
            train_loss: stats[0],
            test_accuracy: last_accuracy,
            samples_per_s: stats[1] * world as f64 / stats[2].max(1e-9),
            comm_fraction: stats[3],
            seconds: stats[2],
        };
        reporter.epoch(&record);
        records.push(record);
        epochs_done = epoch + 1;
        snapshot::save(
            &pg,
            cfg,
            &ddp,
            &optim,
            &facts,
            [epoch + 1, 0, global_step, 0],
            reporter,
        )?;
    }
    let digest = param_digest(ddp.module())?;
    Ok(Summary {
        rank,
        world,
        epochs: epochs_done,
        test_accuracy: last_accuracy,
        samples_per_s: train_samples as f64 * world as f64 / train_time.as_secs_f64().max(1e-9),
        comm_fraction: comm_wait.as_secs_f64() / train_time.as_secs_f64().max(1e-9),
        param_digest: digest,
        records,
    })
}
