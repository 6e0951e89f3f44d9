//! [`Distributed`]: burn-train's `SupervisedLearningStrategy` over phalanx's process group and
//! `DistributedDataParallel`.

use std::sync::Arc;
use std::time::Instant;

use burn::data::dataloader::Progress;
use burn::tensor::Device;
use burn_train::metric::store::{Aggregate, EventStoreClient, Split};
use burn_train::{
    EventProcessorTraining, InferenceStep, Learner, LearnerEvent, LearnerModel, LearningResult,
    SupervisedLearningStrategy, SupervisedTrainingEventProcessor, TrainLoader, TrainingComponents,
    TrainingItem, TrainingStrategy, ValidLoader,
};
use phalanx_ddp::adapter::StateKind;
use phalanx_ddp::fsdp::Sharding;
use phalanx_ddp::{BufferSync, DdpOptions, DistributedDataParallel};
use phalanx_pg::ProcessGroup;

use crate::agree::{agree, Verdict};
use crate::error::{Error, Result};
use crate::grads::to_autodiff;
use crate::share::Share;
use crate::zero::ZeroRedundancy;

/// The validation metrics rank 0 prints after every epoch when the Learner has them
/// ([`Distributed::with_report`]): burn-train's `LossMetric` and `AccuracyMetric`.
pub const DEFAULT_REPORT: [&str; 2] = ["Loss", "Accuracy"];

/// burn-train's Learner on every process of a phalanx job (or alone, without a launcher).
///
/// Give it to `SupervisedTraining::with_training_strategy` (`.into()` makes the
/// `TrainingStrategy`). Every process runs the same Learner program; this strategy:
///
/// * wraps the model in [`DistributedDataParallel`] (rank 0's parameters broadcast, gradients
///   averaged after every backward, BatchNorm statistics rank 0's after every step: the
///   replicas stay bitwise identical);
/// * gives each rank every `world`-th batch of the train loader's pass (Note [Batch striding];
///   build the train loader with one worker, Burn's default, so that the pass has the same
///   order on every rank);
/// * validates on rank 0 over the whole validation loader (Note [Validation on rank 0]);
/// * sends the dashboard's events, checkpoints and the end-of-training summary from rank 0
///   only;
/// * agrees on stopping after every epoch (Note [Epoch agreement]);
/// * maps gradient accumulation onto `no_sync`.
///
/// Without a launcher the process group has one rank and the training is Burn's single-device
/// training on `device`.
#[derive(Clone)]
pub struct Distributed {
    device: Device,
    pg: Arc<ProcessGroup>,
    options: DdpOptions,
    sharding: Sharding,
    report: Vec<String>,
}

impl Distributed {
    /// Joins the job's process group from the launcher's environment (`phalanx launch`,
    /// torchrun, mpirun, Slurm: what `phalanx_pg::init_process_group` reads; a group of one
    /// without any) and trains on `device` (made an autodiff device if it is not one). A panic
    /// on any rank from here on ends the whole job at once, naming the rank.
    pub fn new(device: Device) -> Result<Distributed> {
        let pg = Arc::new(phalanx_pg::init_process_group().map_err(Error::ProcessGroup)?);
        pg.abort_on_panic();
        Ok(Distributed::with_process_group(device, pg))
    }

    /// Trains over a process group the program formed itself.
    pub fn with_process_group(device: Device, pg: Arc<ProcessGroup>) -> Distributed {
        let device = match device.is_autodiff() {
            true => device,
            false => device.autodiff(),
        };
        Distributed {
            device,
            pg,
            options: DdpOptions::default(),
            sharding: Sharding::None,
            report: DEFAULT_REPORT.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// DDP's options (bucket sizes, communication hook, buffer synchronisation).
    pub fn with_ddp_options(mut self, options: DdpOptions) -> Distributed {
        self.options = options;
        self
    }

    /// Shards the training state (`phalanx train --sharding`), as far as the Learner allows:
    /// `none` (DDP, the default) and `optimizer`, ZeRO-1 by whole parameter (PyTorch's
    /// `ZeroRedundancyOptimizer`: each rank keeps the optimizer state of the tensors it owns,
    /// Note [Learner ZeRO]; bitwise DDP's parameters; checkpoints hold every rank's share). The
    /// other modes shard what the Learner's own optimizer must see whole, and are refused
    /// naming why (docs/learner.md, "Not supported, and why").
    pub fn with_sharding(mut self, sharding: Sharding) -> Result<Distributed> {
        let why = match sharding {
            Sharding::None | Sharding::Optimizer => {
                self.sharding = sharding;
                return Ok(self);
            }
            Sharding::Grad => {
                "the Learner steps whole tensors with its own optimizer, so every rank needs \
                 the whole averaged gradient of the tensors it steps; `optimizer` shards the \
                 optimizer state by tensor"
            }
            Sharding::Full | Sharding::Hybrid => {
                "the Learner keeps its whole model between steps and runs its forward on it, so \
                 there are no parameters to free; `optimizer` shards the optimizer state by \
                 tensor"
            }
        };
        Err(Error::Sharding {
            sharding: sharding.name(),
            why,
        })
    }

    /// The validation metrics (by burn-train's metric names) rank 0 prints after every epoch,
    /// one line, those the Learner has; none to print nothing.
    pub fn with_report<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.report = names.into_iter().map(Into::into).collect();
        self
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.pg.rank()
    }

    /// The number of processes training.
    pub fn world_size(&self) -> usize {
        self.pg.world_size()
    }

    /// The process group the strategy trains over.
    pub fn process_group(&self) -> &Arc<ProcessGroup> {
        &self.pg
    }

    fn lead(&self) -> bool {
        self.pg.rank() == 0
    }
}

impl<M: LearnerModel> From<Distributed> for TrainingStrategy<M> {
    fn from(strategy: Distributed) -> TrainingStrategy<M> {
        TrainingStrategy::Custom(Arc::new(strategy))
    }
}

/// A failure the process group cannot come back from (a peer died, the ranks built different
/// models). burn-train's `TrainingError` has no variant to carry it, and the other ranks are
/// already blocked in a collective with this one: panicking lets `abort_on_panic` end the job
/// at once, naming this rank, instead of leaving the others to time out.
fn fatal(error: Error) -> ! {
    panic!("{error}")
}

impl<M: LearnerModel> SupervisedLearningStrategy<M> for Distributed {
    /// Burn's `train` with the start and end events (the dashboard's, the summary) sent on
    /// rank 0 only.
    fn train(
        &self,
        learner: Learner<M>,
        dataloader_train: TrainLoader<M>,
        dataloader_valid: ValidLoader<M>,
        mut components: TrainingComponents<M>,
    ) -> LearningResult<M> {
        let starting_epoch = components.checkpoint.unwrap_or(0) + 1;
        let summary = components.summary.clone();
        let interrupter = components.interrupter.clone();
        if self.lead() {
            interrupter.fail_on_error(components.event_processor.process_train(
                LearnerEvent::Start {
                    total_epochs: components.num_epochs,
                    starting_epoch,
                    label: components.label.clone(),
                },
            ));
        }
        // Note [Step on the compute pool] (phalanx-ddp): on the CPU backend the epochs run on
        // a worker of the pool Burn computes on, so its parallel operations do not hand off
        // to another thread and sleep; a GPU's context stays with the thread that opened it.
        let fit = || {
            self.fit(
                components,
                learner,
                dataloader_train,
                dataloader_valid,
                starting_epoch,
            )
        };
        let (model, mut processor) = if self.device.clone().inner() == Device::flex() {
            phalanx_ddp::on_compute_pool(fit)
        } else {
            fit()
        };
        if self.lead() {
            let summary = summary.and_then(|s| s.init().ok());
            interrupter.fail_on_error(processor.process_train(LearnerEvent::End(summary)));
        }
        let model = model.valid();
        interrupter.fail_on_error(processor.flush());
        LearningResult {
            model,
            renderer: processor.renderer(),
            interrupted: interrupter.interruption(),
            error: interrupter.error(),
        }
    }

    fn fit(
        &self,
        components: TrainingComponents<M>,
        mut learner: Learner<M>,
        dataloader_train: TrainLoader<M>,
        dataloader_valid: ValidLoader<M>,
        starting_epoch: usize,
    ) -> (M, SupervisedTrainingEventProcessor<M>) {
        let (rank, world) = (self.pg.rank(), self.pg.world_size());
        let train = dataloader_train.to_device(&self.device);
        // Note [Shuffle on resume]: a resumed run draws the permutations the uninterrupted
        // run would have drawn for its remaining epochs.
        for _ in 1..starting_epoch {
            drop(train.iter());
        }
        let valid = dataloader_valid.to_device(&self.device.clone().inner());
        learner.fork(&self.device);
        // Checks that every rank built the same model and gives every replica rank 0's values.
        let mut ddp =
            DistributedDataParallel::new(learner.model(), self.pg.clone(), self.options.clone())
                .unwrap_or_else(|source| {
                    fatal(Error::Ddp {
                        rank,
                        operation: "wrapping the model in DistributedDataParallel",
                        source: Box::new(source),
                    })
                });
        adopt(&mut learner, ddp.module().clone(), &self.device);
        // Note [Buffers into the Learner]: only DDP's buffer synchronisation changes values
        // behind the Learner's back.
        let buffers_synced = world > 1
            && self.options.buffer_sync != BufferSync::Off
            && ddp
                .state_infos()
                .iter()
                .any(|s| s.kind == StateKind::Buffer);

        // Note [Learner ZeRO]: on one rank every tensor is its own. A resume loaded every
        // rank's share of the optimizer state into each: each keeps its own.
        let zero = (self.sharding == Sharding::Optimizer && world > 1).then(|| {
            let zero = ZeroRedundancy::new(ddp.state_infos(), rank, world);
            zero.keep_own_state(&mut learner)
                .unwrap_or_else(|e| fatal(e));
            if self.lead() {
                println!(
                    "sharding optimizer: each rank keeps the optimizer state of its tensors \
                     (rank 0: {} elements)",
                    zero.owned_elements()
                );
            }
            zero
        });
        let mut processor = components.event_processor;
        let mut checkpointer = components.checkpointer;
        let mut early_stopping = components.early_stopping;
        let interrupter = components.interrupter;
        let total = components.num_epochs;
        let mut epoch_run = EpochRun {
            strategy: self,
            share: Share::new(rank, world),
            ddp: &mut ddp,
            learner: &mut learner,
            buffers_synced,
            grad_accumulation: components.grad_accumulation,
            zero,
        };
        for epoch in starting_epoch..=total {
            if self.lead() {
                interrupter.fail_on_error(processor.process_train(LearnerEvent::StartSplit {
                    epoch_number: epoch,
                    total_items: train.num_items(),
                }));
            }
            let started = Instant::now();
            epoch_run
                .train(&train, self.lead().then_some(&mut processor), &interrupter)
                .unwrap_or_else(|e| fatal(e));
            // Every rank's pass covers the whole loader (its share trained, the rest skipped).
            let throughput = train.num_items() as f64 / started.elapsed().as_secs_f64();
            // Note [Learner ZeRO]: every rank's share of the optimizer state to rank 0, for its
            // checkpointer (whether this epoch is saved is the checkpointer's choice, on rank 0).
            let mut whole_state = match (&epoch_run.zero, &checkpointer) {
                (Some(zero), Some(_)) => zero
                    .gather_state(&self.pg, epoch_run.learner)
                    .unwrap_or_else(|e| fatal(e)),
                _ => None,
            };
            let mut early_stop = false;
            if self.lead() {
                interrupter.fail_on_error(processor.process_train(LearnerEvent::EndSplit(epoch)));
                if !interrupter.should_stop() {
                    interrupter.fail_on_error(processor.process_valid(LearnerEvent::StartSplit {
                        epoch_number: epoch,
                        total_items: valid.num_items(),
                    }));
                    validate(epoch_run.learner, &valid, &mut processor, &interrupter);
                    interrupter
                        .fail_on_error(processor.process_valid(LearnerEvent::EndSplit(epoch)));
                    interrupter
                        .fail_on_error(processor.process_train(LearnerEvent::EndEpoch(epoch)));
                    // The store holds the epoch's values only once the processor is flushed.
                    interrupter.fail_on_error(processor.flush());
                    self.report(epoch, total, world, throughput, &components.event_store);
                }
                if !interrupter.should_stop() {
                    if let Some(checkpointer) = &mut checkpointer {
                        let learner = &mut *epoch_run.learner;
                        match (whole_state.take(), &epoch_run.zero) {
                            (Some(whole), Some(zero)) => {
                                learner.load_optim(whole);
                                checkpointer.checkpoint(learner, epoch, &components.event_store);
                                zero.keep_own_state(learner).unwrap_or_else(|e| fatal(e));
                            }
                            _ => checkpointer.checkpoint(learner, epoch, &components.event_store),
                        }
                    }
                    if let Some(early) = &mut early_stopping {
                        early_stop = early.should_stop(epoch, &components.event_store);
                    }
                }
            }
            let verdict = agree(&self.pg, early_stop, &interrupter).unwrap_or_else(|e| fatal(e));
            match verdict {
                Verdict::Continue => {}
                Verdict::EarlyStop => break,
                Verdict::Interrupted => {
                    if !interrupter.should_stop() {
                        interrupter.stop(Some("stopped on another rank"));
                    }
                    break;
                }
                Verdict::Failed { rank: failed } => {
                    if !interrupter.should_stop() {
                        interrupter.stop(Some(&format!("rank {failed} failed; see its log")));
                    }
                    break;
                }
            }
        }
        (learner.model(), processor)
    }
}

impl Distributed {
    /// One line on rank 0 after every epoch with the validation metrics named in `report`, and
    /// the epoch's training throughput (samples of the whole loader, all ranks, per second of
    /// rank 0's training pass: what `phalanx train` reports as `samples_per_s`).
    fn report(
        &self,
        epoch: usize,
        total: usize,
        world: usize,
        throughput: f64,
        store: &EventStoreClient,
    ) {
        let values: Vec<String> = self
            .report
            .iter()
            .filter_map(|name| {
                store
                    .find_metric(name, epoch, Aggregate::Mean, &Split::Valid)
                    .map(|v| format!("{name} {v:.4}"))
            })
            .collect();
        if !values.is_empty() {
            println!(
                "epoch {epoch}/{total} valid {} ({world} rank{}) train {throughput:.0} samples/s",
                values.join(" "),
                if world == 1 { "" } else { "s" }
            );
        }
    }
}

/// The state one training epoch works on.
struct EpochRun<'a, M: LearnerModel> {
    strategy: &'a Distributed,
    share: Share,
    ddp: &'a mut DistributedDataParallel<M>,
    learner: &'a mut Learner<M>,
    buffers_synced: bool,
    grad_accumulation: Option<usize>,
    /// `optimizer` sharding: who steps which tensor (Note [Learner ZeRO]).
    zero: Option<ZeroRedundancy>,
}

impl<M: LearnerModel> EpochRun<'_, M> {
    /// This rank's batches of one pass over `train` (Note [Batch striding]), then `join` for
    /// the steps of ranks that have one batch more.
    fn train(
        &mut self,
        train: &TrainLoader<M>,
        mut processor: Option<&mut SupervisedTrainingEventProcessor<M>>,
        interrupter: &burn_train::Interrupter,
    ) -> Result<()> {
        let rank = self.strategy.pg.rank();
        let ddp_error = |operation| {
            move |source: phalanx_ddp::Error| Error::Ddp {
                rank,
                operation,
                source: Box::new(source),
            }
        };
        let share = self.share;
        let mut iterator = train.iter();
        let mut position = 0;
        // Look one owned batch ahead: a rank's last batch must synchronise even in the middle
        // of an accumulation window (as Burn's own loop steps at the end of the pass).
        let mut next_owned = || -> Option<(_, Progress)> {
            loop {
                let item = iterator.next()?;
                let at = position;
                position += 1;
                if share.owns(at) {
                    return Some((item, iterator.progress()));
                }
            }
        };
        let mut ahead = next_owned();
        let mut iteration = 0;
        let mut pending = 0;
        while let Some((item, progress)) = ahead.take() {
            let item = match item {
                Ok(item) => item,
                Err(err) => {
                    interrupter.fail(err);
                    break;
                }
            };
            ahead = next_owned();
            iteration += 1;
            let last = ahead.is_none() || interrupter.should_stop();

            let output = self.learner.train_step(item);
            let model = self.learner.model();
            self.ddp.map_module(|_| model);
            let grads = to_autodiff(self.ddp.module(), output.grads, &self.strategy.device);
            pending += 1;
            let sync = match self.grad_accumulation {
                Some(window) => pending >= window || last,
                None => true,
            };
            if sync {
                let averaged = self
                    .ddp
                    .sync_gradients(grads)
                    .map_err(ddp_error("averaging gradients"))?;
                self.step(averaged)?;
                pending = 0;
            } else {
                self.ddp
                    .no_sync(grads)
                    .map_err(ddp_error("accumulating gradients (no_sync)"))?;
            }

            if let Some(processor) = processor.as_deref_mut() {
                let item = TrainingItem::new(
                    output.item,
                    progress,
                    Some(iteration),
                    Some(self.learner.lr_current()),
                );
                interrupter
                    .fail_on_error(processor.process_train(LearnerEvent::ProcessedItem(item)));
            }
            if interrupter.should_stop() {
                break;
            }
        }
        // A stop that came during a step can leave a window's `no_sync` gradients behind:
        // average them now (an empty backward of this rank's own), as Burn steps at the end.
        if self.ddp.has_accumulated() {
            let empty = to_autodiff(
                self.ddp.module(),
                burn::optim::GradientsParams::new(),
                &self.strategy.device,
            );
            let averaged = self
                .ddp
                .sync_gradients(empty)
                .map_err(ddp_error("averaging the accumulated gradients"))?;
            self.step(averaged)?;
        }
        // Ranks with fewer batches shadow the others' last steps (Note [Uneven inputs] in
        // phalanx-ddp): the same averaged gradients, the same optimizer and scheduler steps.
        let learner = &mut *self.learner;
        let device = &self.strategy.device;
        let (zero, pg) = (self.zero.as_ref(), &self.strategy.pg);
        let shadowed = self
            .ddp
            .join(|module, grads| {
                adopt(learner, module, device);
                learner.lr_step();
                match zero {
                    None => learner.optimizer_step(grads),
                    Some(zero) => {
                        learner.optimizer_step(zero.owned_grads(&learner.model(), grads));
                        // The ranks still training broadcast theirs in the same order.
                        let stepped = zero
                            .gather(pg, learner.model())
                            .unwrap_or_else(|e| fatal(e));
                        adopt(learner, stepped, device);
                    }
                }
                learner.model()
            })
            .map_err(ddp_error("joining the ranks with more batches"))?;
        if shadowed > 0 && self.buffers_synced {
            adopt(
                self.learner,
                self.ddp.module().clone(),
                &self.strategy.device,
            );
        }
        Ok(())
    }

    /// The optimizer step of one synchronising step: DDP's buffers (rank 0's BatchNorm
    /// statistics) into the Learner's model, then Burn's scheduler and optimizer steps, as
    /// Burn's own loop takes them (under `optimizer` sharding, of this rank's tensors, then
    /// a broadcast of each rank's: a collective then).
    fn step(&mut self, averaged: burn::optim::GradientsParams) -> Result<()> {
        if self.buffers_synced {
            adopt(
                self.learner,
                self.ddp.module().clone(),
                &self.strategy.device,
            );
        }
        self.learner.lr_step();
        let Some(zero) = &self.zero else {
            self.learner.optimizer_step(averaged);
            let model = self.learner.model();
            self.ddp.map_module(|_| model);
            return Ok(());
        };
        // Note [Learner ZeRO]: this rank steps its own tensors, then every rank's reach all.
        let owned = zero.owned_grads(&self.learner.model(), averaged);
        self.learner.optimizer_step(owned);
        let model = zero.gather(&self.strategy.pg, self.learner.model())?;
        adopt(self.learner, model.clone(), &self.strategy.device);
        self.ddp.map_module(|_| model);
        Ok(())
    }
}

// Note [Shuffle on resume]: Burn's shuffled loader draws each pass's permutation from its own
// generator, seeded once by `DataLoaderBuilder::shuffle(seed)` and advanced by every `iter()`;
// the generator is not part of the Learner's checkpoint. A program restarted to resume after
// epoch `c` builds its loader afresh, so its first pass would repeat epoch 1's permutation
// (burn-train's own strategies do that). Epoch `k`'s permutation depends only on the seed and
// `k`, so the strategy opens and drops `c` passes before the first epoch it trains: epoch
// `c + 1` then gets the permutation the uninterrupted run gave it, on every rank. Opening a
// pass of a one-worker loader permutes indices and builds no batch. What a resume still cannot
// restore is the device's random generator (dropout masks): Burn keeps its state private
// (burn-flex's `SEED`), and the checkpoint does not hold it (docs/learner.md, "Resume").

/// Puts `module`'s values into the Learner's model (Note [Buffers into the Learner]).
///
/// Note [Buffers into the Learner]: the Learner owns the model and the optimizer (its fields
/// are private), and steps the model itself; DDP holds a clone for the collectives. Gradients
/// need no copy (they go into `optimizer_step`), but DDP's buffer synchronisation (rank 0's
/// BatchNorm statistics after every step) and its construction broadcast produce new values
/// that the Learner must take. Its one way in is `load_model`, a record of the whole model,
/// which loads detached tensors: `fork` onto the training device makes the parameters
/// autodiff leaves that require gradients again. The record copies the model, so the strategy
/// takes this path once at the start and then only for models with buffers on more than one
/// rank.
fn adopt<M: LearnerModel>(learner: &mut Learner<M>, module: M, device: &Device) {
    learner.load_model(module.into_record());
    learner.fork(device);
}

/// Note [Validation on rank 0]: the validation metrics must be those of the whole validation
/// set, for every metric the Learner has, not only averages (AUROC, top-k, a user's own). The
/// replicas are bitwise identical after every step, so rank 0's model is every rank's: rank 0
/// runs Burn's validation pass over the whole loader into the dashboard's processor, and the
/// numbers are exactly those of a single-process run of the same model. The other ranks wait
/// for the epoch agreement meanwhile. Sharding validation would need every metric's state to be
/// reducible across processes, which burn-train does not expose; the cost of this choice is
/// that validation does not get faster with more ranks.
fn validate<M: LearnerModel>(
    learner: &Learner<M>,
    valid: &ValidLoader<M>,
    processor: &mut SupervisedTrainingEventProcessor<M>,
    interrupter: &burn_train::Interrupter,
) {
    let model = learner.model().valid();
    let mut iterator = valid.iter();
    let mut iteration = 0;
    while let Some(item) = iterator.next() {
        let item = match item {
            Ok(item) => item,
            Err(err) => {
                interrupter.fail(err);
                break;
            }
        };
        let progress = iterator.progress();
        iteration += 1;
        let item = InferenceStep::step(&model, item);
        let item = TrainingItem::new(item, progress, Some(iteration), None);
        interrupter.fail_on_error(processor.process_valid(LearnerEvent::ProcessedItem(item)));
        if interrupter.should_stop() {
            break;
        }
    }
}
