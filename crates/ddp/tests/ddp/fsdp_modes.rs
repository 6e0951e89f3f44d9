//! Every sharding mode against DDP, on 1–4 ranks (threads with real process groups, over
//! shared memory and over TCP): a model with BatchNorm buffers, a frozen layer, a layer nobody
//! uses and one only odd ranks use; SGD with momentum and weight decay, and Adam; one bucket
//! and many; gradient clipping by global norm, `no_sync` accumulation and uneven inputs
//! (`join`). Every parameter and buffer must end bitwise equal to DDP's (Note [Shard layout]).

use std::sync::Arc;
use std::time::Duration;

use crate::common::{batch, device, positional};
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, ModuleOptimizer, SgdConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Gradients, Tensor};
use phalanx_ddp::adapter::burn::params_to_flat;
use phalanx_ddp::fsdp::{FsdpOptions, FullyShardedDataParallel, Sharding};
use phalanx_ddp::{DdpOptions, DistributedDataParallel};
use phalanx_pg::ProcessGroup;
use phalanx_testing::{spawn_ranks, spawn_ranks_tcp};

const IN: usize = 6;
const HIDDEN: usize = 8;
const CLASSES: usize = 3;
const DEADLINE: Duration = Duration::from_secs(300);
const LR: f64 = 0.05;

type Params = Vec<Vec<f32>>;

#[derive(Module, Debug)]
struct Net {
    fc1: Linear,
    bn: BatchNorm,
    frozen: Linear,
    head: Linear,
    unused: Linear,
    odd_only: Linear,
}

impl Net {
    /// The same in every run: the linear layers' values come from their position, not from
    /// the device's generator (which the ranks, threads of one process, share).
    fn new(device: &Device) -> Net {
        let net = Net {
            fc1: LinearConfig::new(IN, HIDDEN).init(device),
            bn: BatchNormConfig::new(HIDDEN).init(device),
            frozen: LinearConfig::new(HIDDEN, HIDDEN).init(device).freeze(),
            head: LinearConfig::new(HIDDEN, CLASSES).init(device),
            unused: LinearConfig::new(HIDDEN, CLASSES).init(device),
            odd_only: LinearConfig::new(HIDDEN, CLASSES).init(device),
        };
        positional(net)
    }

    fn forward(&self, x: Tensor<2>, rank: usize) -> Tensor<2> {
        let h = relu(self.bn.forward(self.fc1.forward(x)));
        let h = self.frozen.forward(h);
        let out = self.head.forward(h.clone());
        match rank % 2 {
            1 => out + self.odd_only.forward(h),
            _ => out,
        }
    }
}

fn backward(net: &Net, step: usize, rank: usize) -> Gradients {
    let (x, y) = batch(step, rank, 8, IN, CLASSES);
    CrossEntropyLossConfig::new()
        .init(&device())
        .forward(net.forward(x, rank), y)
        .backward()
}

#[derive(Debug, Clone, Copy)]
enum Opt {
    Sgd,
    Adam,
}

fn optimizer(o: Opt) -> ModuleOptimizer {
    match o {
        Opt::Sgd => SgdConfig::new()
            .with_momentum(Some(MomentumConfig::new()))
            .with_weight_decay(Some(WeightDecayConfig::new(0.1)))
            .init(),
        Opt::Adam => AdamConfig::new()
            .with_weight_decay(Some(WeightDecayConfig::new(0.01)))
            .init(),
    }
}

/// How a run steps: its optimizer, bucket sizes, clipping, accumulation, uneven inputs.
#[derive(Debug, Clone, Copy)]
struct Plan {
    opt: Opt,
    /// Tiny buckets: many of them, parameters split across segments of several.
    many_buckets: bool,
    clip: Option<f32>,
    /// Every other step accumulates under `no_sync`.
    accumulate: bool,
    /// Rank `r` has `r` steps fewer and joins.
    uneven: bool,
    steps: usize,
}

fn ddp_options(plan: &Plan) -> DdpOptions {
    let options = DdpOptions::default();
    match plan.many_buckets {
        true => options.with_bucket_cap_mb(1e-4).with_first_bucket_bytes(40),
        false => options,
    }
}

fn my_steps(plan: &Plan, rank: usize) -> usize {
    match plan.uneven {
        true => plan.steps - rank,
        false => plan.steps,
    }
}

fn run_ddp(pg: ProcessGroup, plan: Plan) -> Params {
    let rank = pg.rank();
    let mut ddp =
        DistributedDataParallel::new(Net::new(&device()), Arc::new(pg), ddp_options(&plan))
            .unwrap();
    let mut optim = optimizer(plan.opt);
    for step in 0..my_steps(&plan, rank) {
        let grads = backward(ddp.module(), step, rank);
        if plan.accumulate && step % 2 == 0 {
            ddp.no_sync(grads).unwrap();
            continue;
        }
        match plan.clip {
            Some(max) => {
                let (g, _) = ddp.sync_gradients_clipped(grads, max).unwrap();
                ddp.map_module(|m| optim.step(LR, m, g));
            }
            None => ddp
                .sync_and_step(grads, |m, g| optim.step(LR, m, g))
                .unwrap(),
        }
    }
    if plan.uneven {
        ddp.join(|m, g| optim.step(LR, m, g)).unwrap();
    }
    params_to_flat(ddp.module()).unwrap()
}

fn run_fsdp(pg: ProcessGroup, plan: Plan, sharding: Sharding) -> Params {
    let rank = pg.rank();
    let options = FsdpOptions::new(sharding).with_ddp(ddp_options(&plan));
    let mut fsdp =
        FullyShardedDataParallel::new(Net::new(&device()), Arc::new(pg), options).unwrap();
    let mut optim = optimizer(plan.opt);
    for step in 0..my_steps(&plan, rank) {
        fsdp.unshard().unwrap();
        let grads = backward(fsdp.module(), step, rank);
        if plan.accumulate && step % 2 == 0 {
            fsdp.no_sync(grads).unwrap();
            continue;
        }
        match plan.clip {
            Some(max) => {
                fsdp.sync_and_step_clipped(grads, max, |s, g| optim.step(LR, s, g))
                    .unwrap();
            }
            None => fsdp
                .sync_and_step(grads, |s, g| optim.step(LR, s, g))
                .unwrap(),
        }
    }
    if plan.uneven {
        fsdp.join(|s, g| optim.step(LR, s, g)).unwrap();
    }
    fsdp.full_params().unwrap()
}

/// Every float tensor of every rank of every mode equals DDP's rank 0, bit for bit.
fn check(world: usize, plan: Plan) {
    phalanx_testing::with_deadline(DEADLINE, move || {
        let reference = spawn_ranks(world, move |pg| run_ddp(pg, plan));
        assert!(reference.iter().all(|p| *p == reference[0]), "DDP replicas");
        for sharding in [Sharding::Optimizer, Sharding::Grad, Sharding::Full] {
            for tcp in [false, true] {
                let run = move |pg| run_fsdp(pg, plan, sharding);
                let got = match tcp {
                    false => spawn_ranks(world, run),
                    true => spawn_ranks_tcp(world, run),
                };
                for (rank, params) in got.iter().enumerate() {
                    for (k, (a, b)) in params.iter().zip(&reference[0]).enumerate() {
                        let same = a.len() == b.len()
                            && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
                        assert!(
                            same,
                            "{sharding} on {world} ranks (tcp: {tcp}), {plan:?}: rank {rank}'s \
                             tensor {k} differs from DDP's"
                        );
                    }
                }
            }
        }
    });
}

const BASE: Plan = Plan {
    opt: Opt::Sgd,
    many_buckets: false,
    clip: None,
    accumulate: false,
    uneven: false,
    steps: 8,
};

#[test]
fn sgd_with_momentum_is_bitwise_ddp_in_every_mode() {
    for world in [1, 2, 3, 4] {
        check(world, BASE);
        check(
            world,
            Plan {
                many_buckets: true,
                ..BASE
            },
        );
    }
}

#[test]
fn adam_is_bitwise_ddp_in_every_mode() {
    for world in [2, 3, 4] {
        check(
            world,
            Plan {
                opt: Opt::Adam,
                many_buckets: true,
                ..BASE
            },
        );
    }
}

#[test]
fn clipping_by_global_norm_is_bitwise_ddp() {
    for world in [2, 3] {
        for many_buckets in [false, true] {
            check(
                world,
                Plan {
                    opt: Opt::Adam,
                    many_buckets,
                    clip: Some(0.05),
                    ..BASE
                },
            );
        }
    }
}

#[test]
fn no_sync_accumulation_and_join_are_bitwise_ddp() {
    for world in [2, 3] {
        check(
            world,
            Plan {
                accumulate: true,
                many_buckets: true,
                ..BASE
            },
        );
        check(
            world,
            Plan {
                uneven: true,
                opt: Opt::Adam,
                ..BASE
            },
        );
    }
}
