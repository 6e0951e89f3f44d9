//! DDP over models with more than trainable parameters, on 2–3 ranks (threads with real process
//! groups): BatchNorm buffers, frozen parameters, parameters unused everywhere or on some ranks,
//! int tensors, uneven shards (join), and the mismatches the agreement check names.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{self, device};
use burn::module::{Module, Param, ParamId, RunningState};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Gradients, Int, Tensor, TensorData};
use phalanx_ddp::adapter::burn::{param_infos, params_to_flat, set_params_from_flat};
use phalanx_ddp::adapter::StateKind;
use phalanx_ddp::{BufferSync, DdpOptions, DistributedDataParallel};
use phalanx_testing::spawn_ranks;

const IN: usize = 6;
const HIDDEN: usize = 8;
const CLASSES: usize = 3;
const DEADLINE: Duration = Duration::from_secs(120);

type Params = Vec<Vec<f32>>;

/// Runs `f` on another thread and fails the test if it has not finished within the deadline.
fn with_deadline<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    phalanx_testing::with_deadline(DEADLINE, f)
}

/// A small CNN-like stack: Linear → BatchNorm → ReLU → Linear, with a frozen layer on the path,
/// a layer nobody uses, one that only odd ranks use, and an int tensor.
#[derive(Module, Debug)]
struct Net {
    fc1: Linear,
    bn: BatchNorm,
    frozen: Linear,
    head: Linear,
    unused: Linear,
    odd_only: Linear,
    steps: Param<Tensor<1, Int>>,
}

impl Net {
    fn new(rank: usize, device: &Device) -> Net {
        Net {
            fc1: LinearConfig::new(IN, HIDDEN).init(device),
            bn: BatchNormConfig::new(HIDDEN).init(device),
            frozen: LinearConfig::new(HIDDEN, HIDDEN).init(device).freeze(),
            head: LinearConfig::new(HIDDEN, CLASSES).init(device),
            unused: LinearConfig::new(HIDDEN, CLASSES).init(device),
            odd_only: LinearConfig::new(HIDDEN, CLASSES).init(device),
            // Differs per rank until the construction broadcast.
            steps: Param::initialized(
                ParamId::new(),
                Tensor::from_data(TensorData::new(vec![rank as i64, 7], [2]), device),
            ),
        }
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

/// Deterministic batch `step` of rank `rank`, different on every rank.
fn batch(step: usize, rank: usize, rows: usize) -> (Tensor<2>, Tensor<1, Int>) {
    common::batch(step, rank, rows, IN, CLASSES)
}

fn backward(net: &Net, step: usize, rank: usize) -> Gradients {
    let (x, y) = batch(step, rank, 8);
    CrossEntropyLossConfig::new()
        .init(&device())
        .forward(net.forward(x, rank), y)
        .backward()
}

fn sgd() -> ModuleOptimizer {
    SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new()))
        .with_weight_decay(Some(WeightDecayConfig::new(0.1)))
        .init()
}

/// Position of the float tensor `name` in canonical order.
fn index_of(net: &Net, name: &str) -> usize {
    param_infos(net)
        .iter()
        .position(|i| i.name == name)
        .unwrap_or_else(|| panic!("no tensor {name}"))
}

struct Run {
    /// All float tensors (parameters and buffers) after each step.
    per_step: Vec<Params>,
    initial: Params,
    steps: Vec<u8>,
}

fn train(world: usize, steps: usize, buffer_sync: BufferSync) -> Vec<Run> {
    with_deadline(move || {
        spawn_ranks(world, |pg| {
            let rank = pg.rank();
            let options = DdpOptions::default().with_buffer_sync(buffer_sync);
            let mut ddp =
                DistributedDataParallel::new(Net::new(rank, &device()), Arc::new(pg), options)
                    .unwrap();
            let initial = params_to_flat(ddp.module()).unwrap();
            let mut optim = sgd();
            let mut per_step = Vec::new();
            for step in 0..steps {
                let grads = backward(ddp.module(), step, rank);
                let grads = ddp.sync_gradients(grads).unwrap();
                ddp.map_module(|m| optim.step(0.05, m, grads));
                per_step.push(params_to_flat(ddp.module()).unwrap());
            }
            let steps = ddp.module().steps.val().into_data();
            Run {
                per_step,
                initial,
                steps: steps.as_bytes().to_vec(),
            }
        })
    })
}

#[test]
fn kinds_are_told_apart() {
    let ddp = with_deadline(|| {
        spawn_ranks(1, |pg| {
            let ddp = DistributedDataParallel::new(
                Net::new(0, &device()),
                Arc::new(pg),
                DdpOptions::default(),
            )
            .unwrap();
            let kinds: Vec<(String, StateKind)> = ddp
                .state_infos()
                .iter()
                .map(|s| (s.info.name.clone(), s.kind.clone()))
                .collect();
            let trainable: Vec<String> = ddp.param_infos().iter().map(|i| i.name.clone()).collect();
            (kinds, trainable)
        })
    });
    let (kinds, trainable) = &ddp[0];
    let kind = |name: &str| {
        kinds
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} not in {kinds:?}"))
            .1
            .clone()
    };
    assert_eq!(kind("fc1.weight"), StateKind::Trainable);
    assert_eq!(kind("bn.gamma"), StateKind::Trainable);
    assert_eq!(kind("bn.running_mean"), StateKind::Buffer);
    assert_eq!(kind("bn.running_var"), StateKind::Buffer);
    assert_eq!(kind("frozen.weight"), StateKind::Frozen);
    assert!(matches!(kind("steps"), StateKind::Int(_)));
    assert!(!trainable
        .iter()
        .any(|n| n.starts_with("frozen") || n.contains("running")));
    assert!(trainable.contains(&"unused.weight".to_string()));
}

#[test]
fn batchnorm_replicas_are_bitwise_equal_after_every_step_on_3_ranks() {
    let runs = train(3, 6, BufferSync::Broadcast);
    let net = Net::new(0, &device());
    let mean = index_of(&net, "bn.running_mean");
    let var = index_of(&net, "bn.running_var");
    for (step, rank0) in runs[0].per_step.iter().enumerate() {
        for (rank, run) in runs.iter().enumerate().skip(1) {
            assert!(
                run.per_step[step] == *rank0,
                "rank {rank} differs from rank 0 after step {step}"
            );
        }
    }
    let last = runs[0].per_step.last().unwrap();
    // The statistics moved (so the equality above covers real updates)…
    assert!(
        last[mean].iter().any(|&v| v != 0.0),
        "running mean never updated"
    );
    assert!(
        last[var].iter().any(|&v| v != 1.0),
        "running var never updated"
    );
    // …and the int tensor is rank 0's on every rank.
    for run in &runs {
        assert_eq!(run.steps, runs[0].steps);
    }
}

#[test]
fn without_buffer_sync_the_statistics_drift_apart() {
    // The control for the test above: each rank's batches differ, so unsynchronised running
    // statistics differ while the parameters stay equal.
    let runs = train(2, 3, BufferSync::Off);
    let net = Net::new(0, &device());
    let mean = index_of(&net, "bn.running_mean");
    let w = index_of(&net, "fc1.weight");
    let (a, b) = (&runs[0].per_step[2], &runs[1].per_step[2]);
    assert_ne!(a[mean], b[mean]);
    assert_eq!(a[w], b[w]);
}

#[test]
fn averaged_buffers_are_equal_and_are_the_mean_of_the_ranks() {
    let runs = train(2, 4, BufferSync::Average);
    for step in 0..4 {
        assert!(
            runs[0].per_step[step] == runs[1].per_step[step],
            "step {step}"
        );
    }
}

#[test]
fn frozen_and_unused_parameters_are_untouched_by_momentum_and_weight_decay() {
    let runs = train(3, 5, BufferSync::Broadcast);
    let net = Net::new(0, &device());
    for name in [
        "frozen.weight",
        "frozen.bias",
        "unused.weight",
        "unused.bias",
    ] {
        let i = index_of(&net, name);
        for run in &runs {
            assert!(
                run.per_step.last().unwrap()[i] == run.initial[i],
                "{name} moved: weight decay or momentum reached a parameter without gradient"
            );
        }
    }
    // Trained parameters did move.
    let head = index_of(&net, "head.weight");
    assert_ne!(
        runs[0].per_step.last().unwrap()[head],
        runs[0].initial[head]
    );
}

#[test]
fn a_parameter_used_on_one_rank_is_averaged_with_the_others_zeros() {
    // Plain SGD, one step: odd_only's update is lr · (g₁ + 0) / 2, g₁ being rank 1's gradient.
    let lr = 0.5;
    let results = with_deadline(move || {
        spawn_ranks(2, |pg| {
            let rank = pg.rank();
            let mut ddp = DistributedDataParallel::new(
                Net::new(rank, &device()),
                Arc::new(pg),
                DdpOptions::default(),
            )
            .unwrap();
            let odd_only = |net: &Net| to_vec(net.odd_only.weight.val());
            let before = odd_only(ddp.module());
            let grads = backward(ddp.module(), 0, rank);
            let local = ddp.module().odd_only.weight.val().grad(&grads).map(to_vec);
            let grads = ddp.sync_gradients(grads).unwrap();
            let mut optim = SgdConfig::new().init();
            ddp.map_module(|m| optim.step(lr, m, grads));
            let after = odd_only(ddp.module());
            (before, local, after)
        })
    });
    assert!(results[0].1.is_none(), "rank 0 does not use odd_only");
    let g1 = results[1].1.as_ref().expect("rank 1 uses odd_only");
    let (before, _, after) = &results[0];
    assert_eq!(after, &results[1].2);
    for ((b, a), g) in before.iter().zip(after).zip(g1) {
        let expected = b - lr as f32 * g / 2.0;
        assert!((a - expected).abs() < 1e-6, "{a} vs {expected}");
    }
}

fn to_vec(t: Tensor<2>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

/// A plain MLP for the uneven-input reference (no batch statistics, so that training on the
/// concatenated batches of the ranks that still have data is exactly the reference).
#[derive(Module, Debug)]
struct Mlp {
    a: Linear,
    b: Linear,
}

impl Mlp {
    fn new(device: &Device) -> Mlp {
        Mlp {
            a: LinearConfig::new(IN, HIDDEN).init(device),
            b: LinearConfig::new(HIDDEN, CLASSES).init(device),
        }
    }

    fn loss(&self, x: Tensor<2>, y: Tensor<1, Int>) -> Tensor<1> {
        let out = self.b.forward(relu(self.a.forward(x)));
        CrossEntropyLossConfig::new()
            .init(&device())
            .forward(out, y)
    }
}

fn fixed(net: &Mlp) -> Params {
    params_to_flat(net)
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (0..p.len())
                .map(|j| ((i * 5 + j * 3) % 13) as f32 / 13.0 - 0.5)
                .collect()
        })
        .collect()
}

fn momentum_sgd() -> ModuleOptimizer {
    SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new()))
        .init()
}

/// Rank r's shard is `shards[r]` batches long; every rank joins after its shard.
fn train_uneven(shards: &'static [usize]) -> Vec<(Params, usize)> {
    with_deadline(move || {
        spawn_ranks(shards.len(), |pg| {
            let rank = pg.rank();
            let net = Mlp::new(&device());
            let net = set_params_from_flat(net.clone(), &fixed(&net)).unwrap();
            let mut ddp =
                DistributedDataParallel::new(net, Arc::new(pg), DdpOptions::default()).unwrap();
            let mut optim = momentum_sgd();
            for step in 0..shards[rank] {
                let (x, y) = batch(step, rank, 4);
                let grads = ddp.module().loss(x, y).backward();
                ddp.sync_and_step(grads, |m, g| optim.step(0.1, m, g))
                    .unwrap();
            }
            let shadowed = ddp.join(|m, g| optim.step(0.1, m, g)).unwrap();
            (params_to_flat(ddp.module()).unwrap(), shadowed)
        })
    })
}

/// One process training on, at each step, the concatenated batches of the ranks whose shard
/// is not exhausted: what uneven DDP must equal.
fn reference_uneven(shards: &[usize]) -> Params {
    let net = Mlp::new(&device());
    let mut net = set_params_from_flat(net.clone(), &fixed(&net)).unwrap();
    let mut optim = momentum_sgd();
    let longest = *shards.iter().max().unwrap();
    for step in 0..longest {
        let (xs, ys): (Vec<_>, Vec<_>) = (0..shards.len())
            .filter(|&r| step < shards[r])
            .map(|r| batch(step, r, 4))
            .unzip();
        let grads = net.loss(Tensor::cat(xs, 0), Tensor::cat(ys, 0)).backward();
        let grads = GradientsParams::from_grads(grads, &net);
        net = optim.step(0.1, net, grads);
    }
    params_to_flat(&net).unwrap()
}

fn assert_close(a: &Params, b: &Params, what: &str) {
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        assert!((x - y).abs() < 1e-5, "{what}: {x} vs {y}");
    }
}

#[test]
fn shards_of_10_and_13_batches_finish_and_match_the_reference() {
    static SHARDS: [usize; 2] = [10, 13];
    let runs = train_uneven(&SHARDS);
    assert_eq!(runs[0].1, 3, "rank 0 shadowed the other's last 3 steps");
    assert_eq!(runs[1].1, 0);
    assert!(runs[0].0 == runs[1].0, "replicas differ after join");
    assert_close(
        &runs[0].0,
        &reference_uneven(&SHARDS),
        "2 ranks, 10 and 13 batches",
    );
}

#[test]
fn three_uneven_shards_finish_and_match_the_reference() {
    static SHARDS: [usize; 3] = [5, 9, 7];
    let runs = train_uneven(&SHARDS);
    assert_eq!(runs.iter().map(|r| r.1).collect::<Vec<_>>(), vec![4, 0, 2]);
    assert!(
        runs.iter().all(|r| r.0 == runs[0].0),
        "replicas differ after join"
    );
    assert_close(
        &runs[0].0,
        &reference_uneven(&SHARDS),
        "3 ranks, 5, 9 and 7 batches",
    );
}

/// A module with an int tensor and a buffer of its own (a running state outside BatchNorm).
#[derive(Module, Debug)]
struct Counted {
    fc: Linear,
    table: Param<Tensor<1, Int>>,
    stats: RunningState<Tensor<1>>,
}

fn mismatch(make: impl Fn(usize, &Device) -> Counted + Sync + Send + 'static) -> Vec<String> {
    with_deadline(move || {
        spawn_ranks(3, |pg| {
            let net = make(pg.rank(), &device());
            match DistributedDataParallel::new(net, Arc::new(pg), DdpOptions::default()) {
                Ok(_) => String::new(),
                Err(e) => e.to_string(),
            }
        })
    })
}

fn counted(table_len: usize, stats_len: usize, device: &Device) -> Counted {
    Counted {
        fc: LinearConfig::new(2, 2).init(device),
        table: Param::initialized(ParamId::new(), Tensor::zeros([table_len], device)),
        stats: RunningState::new(Tensor::zeros([stats_len], device)),
    }
}

#[test]
fn an_int_tensor_mismatch_is_named_with_its_path() {
    let errors = mismatch(|rank, d| counted(if rank == 1 { 5 } else { 4 }, 3, d));
    for (rank, err) in errors.iter().enumerate() {
        assert!(err.contains("rank 1"), "rank {rank}: {err:?}");
        assert!(
            err.contains("table [5]") && err.contains("table [4]"),
            "rank {rank}: {err}"
        );
        assert!(err.contains("int tensor"), "rank {rank}: {err}");
    }
}

#[test]
fn a_buffer_shape_mismatch_is_named_with_its_path() {
    let errors = mismatch(|rank, d| counted(4, if rank == 2 { 6 } else { 3 }, d));
    for (rank, err) in errors.iter().enumerate() {
        assert!(err.contains("rank 2"), "rank {rank}: {err:?}");
        assert!(
            err.contains("stats [6] (buffer)") && err.contains("stats [3] (buffer)"),
            "rank {rank}: {err}"
        );
    }
}

#[test]
fn ddp_over_a_subgroup_replicates_within_it_only() {
    // Hybrid data parallelism: replicas in pairs [0, 1] and [2, 3], each pair its own DDP.
    let runs = with_deadline(|| {
        spawn_ranks(4, |pg| {
            let rank = pg.rank();
            let pair = phalanx_pg::new_subgroups(&pg, 2).unwrap();
            let mut ddp = DistributedDataParallel::new(
                Net::new(rank, &device()),
                Arc::new(pair),
                DdpOptions::default(),
            )
            .unwrap();
            let mut optim = sgd();
            for step in 0..3 {
                let grads = backward(ddp.module(), step, rank);
                let grads = ddp.sync_gradients(grads).unwrap();
                ddp.map_module(|m| optim.step(0.05, m, grads));
            }
            params_to_flat(ddp.module()).unwrap()
        })
    });
    assert_eq!(runs[0], runs[1], "pair [0, 1] replicas");
    assert_eq!(runs[2], runs[3], "pair [2, 3] replicas");
    assert_ne!(runs[0], runs[2], "the pairs train apart");
}
