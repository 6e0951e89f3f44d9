//! Training-step throughput on synthetic data, the measurement behind `phalanx bench train`.

use std::{sync::Arc, time::Instant};

use phalanx_ddp::{Bf16CompressHook, DdpOptions, DistributedDataParallel};
use phalanx_pg::ProcessGroup;

use crate::model::{with_model, ModelKind, ModelSpec, WithModel};
use crate::{device, train_step, Classifier, Optim, OptimOptions, OptimizerKind, Result};

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
    /// Peak resident memory of this process in MiB (VmHWM), max over ranks.
    pub peak_rss_mib: f64,
}

/// Runs `warmup + steps` DDP training steps of the model (the MLP is 784-hidden×depth-10) on
/// synthetic MNIST-shaped batches (fixed per rank, so data loading is not measured).
pub fn measure(pg: Arc<ProcessGroup>, c: &ThroughputConfig) -> Result<Throughput> {
    let spec = ModelSpec {
        kind: c.model,
        input: 784,
        classes: 10,
        hidden: c.hidden,
        depth: c.depth,
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
    let (rank, world) = (pg.rank(), pg.world_size());
    let mut options = DdpOptions::default();
    if c.bf16 {
        options = options.with_comm_hook(Bf16CompressHook);
    }
    let mut ddp = DistributedDataParallel::new(model, pg.clone(), options)?;
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
        train_step(&mut ddp, &mut sgd, x, y)?;
    }
    pg.barrier()?;
    let wait0 = ddp.stats().wait;
    let start = Instant::now();
    for _ in 0..c.steps {
        train_step(&mut ddp, &mut sgd, x, y)?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let comm = (ddp.stats().wait - wait0).as_secs_f64() / elapsed.max(1e-9);
    let mut slowest = [elapsed, peak_rss_mib()];
    pg.allreduce(&mut slowest, phalanx_core::ReduceOp::Max)?;
    let mut comm_mean = [comm];
    pg.allreduce(&mut comm_mean, phalanx_core::ReduceOp::Avg)?;
    Ok(Throughput {
        world,
        samples_per_s: (c.steps * c.batch_size * world) as f64 / slowest[0],
        step_ms: 1e3 * slowest[0] / c.steps as f64,
        comm_fraction: comm_mean[0],
        peak_rss_mib: slowest[1],
    })
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
