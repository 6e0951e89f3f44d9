//! Optimizers (`--optimizer sgd|adam|adamw`, on Burn's) and learning-rate schedules
//! (`--lr-schedule constant|cosine|step`, with warm-up), PyTorch's names and defaults.

mod schedule;

use burn::module::Module;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{
    AdamConfig, AdamWConfig, GradientsParams, ModuleOptimizer, OptimizerRecord, SgdConfig,
};
use burn::tensor::Bytes;

pub use schedule::{LrSchedule, ScheduleKind};

/// Which optimizer (`--optimizer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OptimizerKind {
    /// `torch.optim.SGD` (with `--momentum`, dampening 0).
    #[default]
    Sgd,
    /// `torch.optim.Adam` (betas 0.9, 0.999, eps 1e-8; L2 weight decay).
    Adam,
    /// `torch.optim.AdamW` (decoupled weight decay).
    AdamW,
}

impl OptimizerKind {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::Adam => "adam",
            OptimizerKind::AdamW => "adamw",
        }
    }

    /// PyTorch's default weight decay for this optimizer (AdamW's is 0.01, the others' 0).
    pub fn default_weight_decay(self) -> f32 {
        match self {
            OptimizerKind::AdamW => 0.01,
            _ => 0.0,
        }
    }
}

impl std::fmt::Display for OptimizerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for OptimizerKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sgd" => Ok(OptimizerKind::Sgd),
            "adam" => Ok(OptimizerKind::Adam),
            "adamw" => Ok(OptimizerKind::AdamW),
            _ => Err(format!(
                "unknown optimizer {s:?}: expected sgd, adam or adamw"
            )),
        }
    }
}

/// Hyper-parameters of [`Optim`], PyTorch's names and defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptimOptions {
    /// Which optimizer.
    pub kind: OptimizerKind,
    /// Base learning rate (0.01 in the seed recipe); the schedule scales it per step.
    pub lr: f64,
    /// SGD's momentum factor; 0 disables it. Dampening is 0, as in PyTorch.
    pub momentum: f64,
    /// Weight decay: L2 penalty added to the gradient (SGD, Adam), decoupled (AdamW).
    pub weight_decay: f32,
    /// How the learning rate changes over the run.
    pub schedule: LrSchedule,
}

impl Default for OptimOptions {
    fn default() -> Self {
        OptimOptions {
            kind: OptimizerKind::Sgd,
            lr: 0.01,
            momentum: 0.0,
            weight_decay: 0.0,
            schedule: LrSchedule::default(),
        }
    }
}

/// An optimizer with its schedule: Burn's optimizer, the learning rate of the current step, and
/// its state in and out of checkpoints.
#[derive(Clone)]
pub struct Optim {
    optim: ModuleOptimizer,
    options: OptimOptions,
    lr: f64,
}

impl std::fmt::Debug for Optim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Optim")
            .field("options", &self.options)
            .field("lr", &self.lr)
            .finish()
    }
}

impl Optim {
    /// The optimizer `options` describe, at its base learning rate.
    pub fn new(options: OptimOptions) -> Self {
        let decay =
            (options.weight_decay != 0.0).then(|| WeightDecayConfig::new(options.weight_decay));
        let optim = match options.kind {
            OptimizerKind::Sgd => {
                let momentum = (options.momentum != 0.0).then(|| {
                    MomentumConfig::new()
                        .with_momentum(options.momentum)
                        .with_dampening(0.0)
                });
                SgdConfig::new()
                    .with_momentum(momentum)
                    .with_weight_decay(decay)
                    .init()
            }
            // PyTorch's eps (Burn's default is 1e-5).
            OptimizerKind::Adam => AdamConfig::new()
                .with_epsilon(1e-8)
                .with_weight_decay(decay)
                .init(),
            OptimizerKind::AdamW => AdamWConfig::new()
                .with_epsilon(1e-8)
                .with_weight_decay(options.weight_decay)
                .init(),
        };
        Optim {
            optim,
            options,
            lr: options.lr,
        }
    }

    /// The hyper-parameters.
    pub fn options(&self) -> &OptimOptions {
        &self.options
    }

    /// Whether this optimizer keeps per-parameter state (momentum, Adam's moments) that a
    /// checkpoint must carry.
    pub fn has_state(&self) -> bool {
        self.options.kind != OptimizerKind::Sgd || self.options.momentum != 0.0
    }

    /// Sets the learning rate of step `step` (0-based, counted over the whole run) from the
    /// schedule.
    pub fn schedule_step(&mut self, step: u64, steps_per_epoch: u64, total_steps: u64) {
        self.lr = self
            .options
            .schedule
            .lr(self.options.lr, step, steps_per_epoch, total_steps);
    }

    /// The learning rate the next update uses.
    pub fn lr(&self) -> f64 {
        self.lr
    }

    /// One update of the parameters that have a gradient in `grads`.
    pub fn step<M: Module>(&mut self, module: M, grads: GradientsParams) -> M {
        self.optim.step(self.lr, module, grads)
    }

    /// Burn's optimizer.
    pub fn inner(&self) -> &ModuleOptimizer {
        &self.optim
    }

    /// Burn's optimizer, to load state into (`phalanx_checkpoint::state_dict::load`).
    pub fn inner_mut(&mut self) -> &mut ModuleOptimizer {
        &mut self.optim
    }

    /// The optimizer's state (momentum buffers, Adam's moments and step counts) in Burn's
    /// burnpack format, keyed by parameter id; `None` when there is none (plain SGD, or no step
    /// taken yet). Ids are stable across processes (Note [Stable parameter ids]), so a resumed
    /// run maps the state onto its parameters.
    pub fn state_bytes(&self) -> Result<Option<Vec<u8>>, String> {
        let record = self.optim.to_record();
        if record.is_empty() {
            return Ok(None);
        }
        let bytes = record.into_bytes().map_err(|e| e.to_string())?;
        Ok(Some(bytes.to_vec()))
    }

    /// Restores the state written by [`state_bytes`](Self::state_bytes).
    pub fn load_state(&mut self, bytes: Vec<u8>) -> Result<(), String> {
        let record =
            OptimizerRecord::from_bytes(Bytes::from_bytes_vec(bytes)).map_err(|e| e.to_string())?;
        self.optim = self.optim.clone().load_record(record);
        Ok(())
    }
}
