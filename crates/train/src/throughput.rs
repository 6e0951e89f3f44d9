//! Training-step throughput on synthetic data, the measurement behind `phalanx bench train`.

use std::{sync::Arc, time::Instant};

use phalanx_ddp::{fsdp::Sharding, Bf16CompressHook, DataParallel, DdpOptions, StepKind};
use phalanx_pg::ProcessGroup;

use crate::model::{with_model, ModelKind, ModelSpec, WithModel};
pub use crate::parallel::StateMemory;
use crate::parallel::{self, WithEngine, Wrapping};
use crate::{device, Classifier, Optim, OptimOptions, OptimizerKind, Result};

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub struct ThroughputConfig {
    /// Which model.
    pub model: ModelKind,
    /// Which optimizer.
    pub optimizer: OptimizerKind,
    /// Hidden width (MLP).
    pub hidden: usize,
    /// Hidden layers.
    pub depth: usize,
    /// Samples per step on each rank.
    pub batch_size: usize,
    /// Timed steps.
    pub steps: usize,
    /// Untimed steps first.
    pub warmup: usize,
    /// bf16 gradient compression.
    pub bf16: bool,
    /// What each rank keeps whole and what only its shard of.
    pub sharding: Sharding,
    /// Under `full`: FSDP2's `reshard_after_forward`.
    pub reshard_after_forward: bool,
}

/// One rank's measurement, reduced over ranks.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    /// Ranks.
    pub world: usize,
    /// Samples per second, all ranks together (slowest rank's time).
    pub samples_per_s: f64,
    /// Mean step time in milliseconds (slowest rank).
    pub step_ms: f64,
    /// Share of the step blocked on gradient communication (mean over ranks).
    pub comm_fraction: f64,
    /// Peak resident memory of this process in MiB during the timed steps (VmHWM, reset after
    /// the warm-up), max over ranks.
    pub peak_rss_mib: f64,
    /// Peak resident memory before that: building and wrapping the model, the warm-up steps.
    pub build_rss_mib: f64,
    /// Training state one rank holds between steps, max over ranks (MiB).
    pub state: StateMemory,
}

/// Runs `warmup + steps` training steps (DDP or `c.sharding`) of the model (the MLP is 784-hidden×depth-10) on
/// synthetic MNIST-shaped batches (fixed per rank, so data loading is not measured).
pub fn measure(pg: Arc<ProcessGroup>, c: &ThroughputConfig) -> Result<Throughput> {
    if c.model.reads_text() {
        return Err(crate::Error::Config(format!(
            "bench train measures the models of feature rows (mlp, cnn, transformer); time \
             --model {} with `phalanx train --model {} --max-steps N`, whose summary has its \
             samples per second",
            c.model, c.model
        )));
    }
    let spec = ModelSpec {
        kind: c.model,
        input: 784,
        classes: 10,
        hidden: c.hidden,
        depth: c.depth,
        heads: 1,
        dropout: 0.0,
        seed: 0,
    };
    with_model(&spec, &device(), Measure { pg, c: *c })
}

struct Measure {
    pg: Arc<ProcessGroup>,
    c: ThroughputConfig,
}

impl WithModel for Measure {
    type Output = Result<Throughput>;

    fn run<M: Classifier>(self, model: M) -> Result<Throughput> {
        measure_model(self.pg, &self.c, model)
    }
}

fn measure_model<M: Classifier>(
    pg: Arc<ProcessGroup>,
    c: &ThroughputConfig,
    model: M,
) -> Result<Throughput> {
    let mut options = DdpOptions::default();
    if c.bf16 {
        options = options.with_comm_hook(Bf16CompressHook);
    }
    let wrapping = Wrapping {
        sharding: c.sharding,
        reshard_after_forward: c.reshard_after_forward,
        shard_group_size: None,
        ddp: options,
    };
    parallel::with_engine(model, pg.clone(), wrapping, InEngine { pg, c })?
}

/// The measurement, handed the model in its engine.
struct InEngine<'a> {
    pg: Arc<ProcessGroup>,
    c: &'a ThroughputConfig,
}

impl<M: Classifier> WithEngine<M> for InEngine<'_> {
    type Output = Result<Throughput>;

    fn run<E: DataParallel<M>>(self, mut par: E) -> Result<Throughput> {
        let InEngine { pg, c } = self;
        let (rank, world) = (pg.rank(), pg.world_size());
        let mut sgd = Optim::new(OptimOptions {
            kind: c.optimizer,
            lr: if c.optimizer == OptimizerKind::Sgd {
                0.01
            } else {
                1e-3
            },
            ..OptimOptions::default()
        });
        let data = phalanx_data::synthetic(c.batch_size * world, 0);
        let rows = rank * c.batch_size..(rank + 1) * c.batch_size;
        let x = &data.features()[rows.start * 784..rows.end * 784];
        let y = &data.labels()[rows];
        for _ in 0..c.warmup {
            parallel::step(&mut par, &mut sgd, x, y, StepKind::Fused)?;
        }
        pg.barrier()?;
        let build_rss = peak_rss_mib();
        reset_peak_rss();
        let wait0 = par.stats().wait;
        let start = Instant::now();
        for _ in 0..c.steps {
            parallel::step(&mut par, &mut sgd, x, y, StepKind::Fused)?;
        }
        let elapsed = start.elapsed().as_secs_f64();
        let comm = (par.stats().wait - wait0).as_secs_f64() / elapsed.max(1e-9);
        let state = parallel::state_memory(&par, &sgd)?;
        let mut slowest = [
            elapsed,
            peak_rss_mib(),
            state.params_mib,
            state.grads_mib,
            state.optim_mib,
            build_rss,
        ];
        pg.allreduce(&mut slowest, phalanx_core::ReduceOp::Max)?;
        let mut comm_mean = [comm];
        pg.allreduce(&mut comm_mean, phalanx_core::ReduceOp::Avg)?;
        Ok(Throughput {
            world,
            samples_per_s: (c.steps * c.batch_size * world) as f64 / slowest[0],
            step_ms: 1e3 * slowest[0] / c.steps as f64,
            comm_fraction: comm_mean[0],
            peak_rss_mib: slowest[1],
            build_rss_mib: slowest[5],
            state: StateMemory {
                params_mib: slowest[2],
                grads_mib: slowest[3],
                optim_mib: slowest[4],
            },
        })
    }
}

/// Resets this process's peak resident set size (`VmHWM`) to its current one (Linux
/// `/proc/self/clear_refs`, value 5); nothing where that is not available.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident set size of this process (Linux `VmHWM`), in MiB; 0 when unknown.
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|kb| kb.parse::<f64>().ok())
            })
        })
        .map_or(0.0, |kb| kb / 1024.0)
}
