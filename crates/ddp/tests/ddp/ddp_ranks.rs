//! DDP on N ranks as threads (phalanx_testing::spawn_ranks): replicas stay bitwise identical,
//! N ranks × batch b match 1 rank × batch N·b, no_sync accumulates, mismatched models are named.

use std::sync::Arc;
use std::time::Duration;

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Gradients, Int, Tensor, TensorData};
use phalanx_ddp::adapter::burn::{params_to_flat, set_params_from_flat};
use phalanx_ddp::{Bf16CompressHook, BucketMemory, DdpOptions, DistributedDataParallel};
use phalanx_testing::spawn_ranks;

const IN: usize = 10;
const CLASSES: usize = 3;
/// Flat parameter values in canonical order.
type Params = Vec<Vec<f32>>;

const DEADLINE: Duration = Duration::from_secs(120);

#[derive(Module, Debug)]
struct Net {
    layers: Vec<Linear>,
}

impl Net {
    fn new(hidden: usize, device: &Device) -> Net {
        Net {
            layers: vec![
                LinearConfig::new(IN, hidden).init(device),
                LinearConfig::new(hidden, hidden).init(device),
                LinearConfig::new(hidden, CLASSES).init(device),
            ],
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let n = self.layers.len();
        self.layers.iter().enumerate().fold(x, |x, (i, l)| {
            let y = l.forward(x);
            if i + 1 < n {
                relu(y)
            } else {
                y
            }
        })
    }
}

fn device() -> Device {
    Device::flex().autodiff()
}

/// Deterministic batch `step` of `rows` rows, starting at row `first`.
fn batch(step: usize, first: usize, rows: usize) -> (Vec<f32>, Vec<i64>) {
    let x = (first..first + rows)
        .flat_map(|r| {
            (0..IN).map(move |c| (((step * 31 + r * 17 + c * 7) % 23) as f32 / 11.5) - 1.0)
        })
        .collect();
    let y = (first..first + rows)
        .map(|r| ((step + r * 5) % CLASSES) as i64)
        .collect();
    (x, y)
}

fn backward(net: &Net, (x, y): &(Vec<f32>, Vec<i64>)) -> Gradients {
    let d = device();
    let x = Tensor::<2>::from_data(TensorData::new(x.clone(), [y.len(), IN]), &d);
    let y = Tensor::<1, Int>::from_data(TensorData::new(y.clone(), [y.len()]), &d);
    CrossEntropyLossConfig::new()
        .init(&d)
        .forward(net.forward(x), y)
        .backward()
}

/// Runs `f` on another thread and fails the test if it has not finished within the deadline.
fn with_deadline<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    phalanx_testing::with_deadline(DEADLINE, f)
}

/// Trains on `world` ranks for `steps` steps, rank r taking rows [r·b, (r+1)·b) of each global
/// batch; returns, per rank, (initial params after the broadcast, final params).
fn train_ddp(world: usize, b: usize, steps: usize, options: DdpOptions) -> Vec<(Params, Params)> {
    with_deadline(move || {
        spawn_ranks(world, |pg| {
            let rank = pg.rank();
            let net = Net::new(16, &device()); // random init: differs per rank until the broadcast
            let mut ddp = DistributedDataParallel::new(net, Arc::new(pg), options.clone()).unwrap();
            let initial = params_to_flat(ddp.module()).unwrap();
            let mut optim = SgdConfig::new().init();
            for step in 0..steps {
                let grads = backward(ddp.module(), &batch(step, rank * b, b));
                let grads = ddp.sync_gradients(grads).unwrap();
                ddp.map_module(|m| optim.step(0.1, m, grads));
            }
            assert_eq!(ddp.stats().syncs, steps as u64);
            (initial, params_to_flat(ddp.module()).unwrap())
        })
    })
}

/// DDP over a 16-wide `Net` whose parameters are the same in every run (the broadcast value of
/// a random init differs run to run), so that two runs can be compared bit for bit.
fn fixed_ddp(pg: phalanx_pg::ProcessGroup, options: DdpOptions) -> DistributedDataParallel<Net> {
    fixed_ddp_of(16, 1.0, pg, options)
}

/// [`fixed_ddp`] for a `hidden`-wide `Net`, its values in `[-scale/2, scale/2)`.
fn fixed_ddp_of(
    hidden: usize,
    scale: f32,
    pg: phalanx_pg::ProcessGroup,
    options: DdpOptions,
) -> DistributedDataParallel<Net> {
    let mut ddp =
        DistributedDataParallel::new(Net::new(hidden, &device()), Arc::new(pg), options).unwrap();
    let fixed: Vec<Vec<f32>> = params_to_flat(ddp.module())
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (0..p.len())
                .map(|j| scale * (((i * 7 + j * 3) % 17) as f32 / 17.0 - 0.5))
                .collect()
        })
        .collect();
    ddp.map_module(|m| set_params_from_flat(m, &fixed).unwrap());
    ddp
}

#[test]
fn replicas_end_bitwise_identical_on_2_and_3_ranks() {
    for world in [2, 3] {
        let results = train_ddp(world, 4, 5, DdpOptions::default());
        for (rank, (initial, last)) in results.iter().enumerate() {
            assert_eq!(
                initial, &results[0].0,
                "rank {rank} initial params differ from rank 0"
            );
            assert_eq!(
                last, &results[0].1,
                "rank {rank} final params differ from rank 0 (world {world})"
            );
        }
        assert_ne!(
            results[0].0, results[0].1,
            "training changed the parameters"
        );
    }
}

#[test]
fn small_buckets_and_bf16_compression_keep_replicas_identical() {
    // A 64-byte cap puts nearly every parameter in its own bucket: many overlapping launches.
    let options = DdpOptions::default()
        .with_first_bucket_bytes(64)
        .with_bucket_cap_mb(0.0001);
    let results = train_ddp(2, 4, 4, options);
    assert_eq!(results[0].1, results[1].1);
    let results = train_ddp(
        2,
        4,
        4,
        DdpOptions::default().with_comm_hook(Bf16CompressHook),
    );
    assert_eq!(results[0].1, results[1].1);
}

#[test]
fn two_ranks_of_batch_b_match_one_rank_of_batch_2b() {
    let (b, steps) = (6, 6);
    let results = train_ddp(2, b, steps, DdpOptions::default());
    let (initial, ddp_final) = &results[0];

    let net = set_params_from_flat(Net::new(16, &device()), initial).unwrap();
    let mut optim = SgdConfig::new().init();
    let mut net = net;
    for step in 0..steps {
        let grads = backward(&net, &batch(step, 0, 2 * b));
        let grads = GradientsParams::from_grads(grads, &net);
        net = optim.step(0.1, net, grads);
    }
    let local = params_to_flat(&net).unwrap();
    let mut worst = 0f32;
    for (a, l) in ddp_final.iter().flatten().zip(local.iter().flatten()) {
        worst = worst.max((a - l).abs() / l.abs().max(1e-3));
    }
    assert!(worst < 1e-4, "largest relative difference {worst}");
}

#[test]
fn sync_and_step_matches_sync_then_step_bitwise() {
    // Per-bucket optimizer steps (momentum included) equal one step over all gradients.
    let run = |fused: bool| {
        with_deadline(move || {
            spawn_ranks(2, move |pg| {
                let rank = pg.rank();
                let options = DdpOptions::default()
                    .with_first_bucket_bytes(64)
                    .with_bucket_cap_mb(0.001);
                let mut ddp = fixed_ddp(pg, options);
                assert!(ddp.bucket_assignment().len() > 2);
                let mut optim = SgdConfig::new()
                    .with_momentum(Some(burn::optim::momentum::MomentumConfig::new()))
                    .init();
                for step in 0..4 {
                    let grads = backward(ddp.module(), &batch(step, rank * 4, 4));
                    if fused {
                        ddp.sync_and_step(grads, |m, g| optim.step(0.1, m, g))
                            .unwrap();
                    } else {
                        let grads = ddp.sync_gradients(grads).unwrap();
                        ddp.map_module(|m| optim.step(0.1, m, grads));
                    }
                }
                params_to_flat(ddp.module()).unwrap()
            })
        })
    };
    let fused = run(true);
    assert_eq!(fused[0], fused[1]);
    assert_eq!(fused[0], run(false)[0]);
}

#[test]
fn gradient_as_bucket_view_gives_the_packed_buckets_results_bitwise() {
    // A 600x600 weight (1.4 MiB) travels in its own gradient's memory with views, packed
    // without. Every path that drains buckets must give the same bits: plain, fused with a
    // momentum step, after no_sync, clipped, and with a joined rank (zeros, rescaled).
    let run = |views: bool| {
        with_deadline(move || {
            spawn_ranks(2, move |pg| {
                let rank = pg.rank();
                let options = DdpOptions::default().with_gradient_as_bucket_view(views);
                let mut ddp = fixed_ddp_of(600, 0.1, pg, options);
                let buckets = ddp.bucket_assignment();
                let mut optim = SgdConfig::new()
                    .with_momentum(Some(burn::optim::momentum::MomentumConfig::new()))
                    .init();
                let mut norms = Vec::new();
                for step in 0..4 {
                    let grads = backward(ddp.module(), &batch(step, rank * 4, 4));
                    match step {
                        0 => {
                            let g = ddp.sync_gradients(grads).unwrap();
                            ddp.map_module(|m| optim.step(0.1, m, g));
                        }
                        1 => ddp
                            .sync_and_step(grads, |m, g| optim.step(0.1, m, g))
                            .unwrap(),
                        2 => {
                            ddp.no_sync(grads).unwrap();
                            let grads = backward(ddp.module(), &batch(9, rank * 4, 4));
                            let (g, norm) = ddp.sync_gradients_clipped(grads, 0.05).unwrap();
                            norms.push(norm);
                            ddp.map_module(|m| optim.step(0.1, m, g));
                        }
                        _ => {
                            let (g, norm) = ddp.sync_gradients_clipped(grads, 1e6).unwrap();
                            norms.push(norm);
                            ddp.map_module(|m| optim.step(0.1, m, g));
                        }
                    }
                }
                // Rank 1 runs out of data: rank 0's extra step is averaged with its zeros.
                if rank == 0 {
                    let grads = backward(ddp.module(), &batch(5, 0, 4));
                    ddp.sync_and_step(grads, |m, g| optim.step(0.1, m, g))
                        .unwrap();
                }
                ddp.join(|m, g| optim.step(0.1, m, g)).unwrap();
                (buckets, norms, params_to_flat(ddp.module()).unwrap())
            })
        })
    };
    let (viewed, packed) = (run(true), run(false));
    let big = 2; // layers.1.weight, 600x600, in canonical order
    assert!(
        viewed[0].0.contains(&vec![big]) && !packed[0].0.contains(&vec![big]),
        "views: {:?}, packed: {:?}",
        viewed[0].0,
        packed[0].0
    );
    assert!(viewed[0].1[0] > 0.05, "the clipped step clipped");
    for rank in 0..2 {
        assert_eq!(viewed[rank].1, packed[rank].1, "rank {rank}'s norms");
        assert!(
            viewed[rank].2 == packed[rank].2,
            "rank {rank}'s parameters differ"
        );
        assert!(viewed[rank].2 == viewed[0].2, "replicas differ");
    }
}

#[test]
fn no_sync_accumulates_until_the_next_sync() {
    // Rank r: no_sync on batch A_r, then sync on batch B_r. With lr 1, the update must be the
    // average over ranks of (grad A_r + grad B_r).
    let results = with_deadline(|| {
        spawn_ranks(2, |pg| {
            let rank = pg.rank();
            let mut ddp = DistributedDataParallel::new(
                Net::new(8, &device()),
                Arc::new(pg),
                DdpOptions::default(),
            )
            .unwrap();
            let before = params_to_flat(ddp.module()).unwrap();
            let grads = backward(ddp.module(), &batch(0, rank * 3, 3));
            ddp.no_sync(grads).unwrap();
            assert!(ddp.has_accumulated());
            let grads = backward(ddp.module(), &batch(1, rank * 3, 3));
            let grads = ddp.sync_gradients(grads).unwrap();
            assert!(!ddp.has_accumulated());
            let mut optim = SgdConfig::new().init();
            ddp.map_module(|m| optim.step(1.0, m, grads));
            (before, params_to_flat(ddp.module()).unwrap())
        })
    });
    let (before, after) = &results[0];
    assert_eq!(after, &results[1].1);

    let net = set_params_from_flat(Net::new(8, &device()), before).unwrap();
    let mut expected: Vec<Vec<f32>> = before.iter().map(|p| vec![0.0; p.len()]).collect();
    for rank in 0..2 {
        for step in 0..2 {
            let grads =
                GradientsParams::from_grads(backward(&net, &batch(step, rank * 3, 3)), &net);
            let mut optim = SgdConfig::new().init();
            let stepped = params_to_flat(&optim.step(1.0, net.clone(), grads)).unwrap();
            for ((e, s), b) in expected.iter_mut().zip(&stepped).zip(before) {
                for ((e, s), b) in e.iter_mut().zip(s).zip(b) {
                    *e += (b - s) / 2.0; // this rank-step's gradient, averaged over 2 ranks
                }
            }
        }
    }
    for ((a, b), e) in after
        .iter()
        .flatten()
        .zip(before.iter().flatten())
        .zip(expected.iter().flatten())
    {
        assert!(((b - a) - e).abs() < 1e-5, "update {} expected {e}", b - a);
    }
}

#[test]
fn mismatched_models_name_the_parameter_and_rank() {
    let results = with_deadline(|| {
        spawn_ranks(3, |pg| {
            let hidden = if pg.rank() == 2 { 9 } else { 8 };
            DistributedDataParallel::new(
                Net::new(hidden, &device()),
                Arc::new(pg),
                DdpOptions::default(),
            )
            .err()
            .map(|e| e.to_string())
        })
    });
    for (rank, err) in results.iter().enumerate() {
        let err = err
            .as_ref()
            .unwrap_or_else(|| panic!("rank {rank} accepted a mismatched model"));
        assert!(err.contains("rank 2"), "{err}");
        assert!(
            err.contains("layers.0.weight [10, 9]") && err.contains("layers.0.weight [10, 8]"),
            "{err}"
        );
    }
}

#[test]
fn device_buckets_match_host_buckets_bitwise() {
    // Device buckets (Burn tensors, here on the CPU: averaged through the host) must give the
    // same parameters as host buckets, bit for bit: same layout, same allreduce. Covers
    // no_sync accumulation, sync_gradients and the fused sync_and_step.
    let run = |memory: BucketMemory| {
        with_deadline(move || {
            spawn_ranks(2, move |pg| {
                let rank = pg.rank();
                let options = DdpOptions::default()
                    .with_first_bucket_bytes(64)
                    .with_bucket_cap_mb(0.001)
                    .with_bucket_memory(memory);
                let mut ddp = fixed_ddp(pg, options);
                let fixed = params_to_flat(ddp.module()).unwrap();
                let mut optim = SgdConfig::new().init();
                for step in 0..6 {
                    let grads = backward(ddp.module(), &batch(step, rank * 4, 4));
                    match step % 3 {
                        0 => {
                            ddp.no_sync(grads).unwrap();
                            assert!(ddp.has_accumulated());
                        }
                        1 => ddp
                            .sync_and_step(grads, |m, g| optim.step(0.1, m, g))
                            .unwrap(),
                        _ => {
                            let grads = ddp.sync_gradients(grads).unwrap();
                            ddp.map_module(|m| optim.step(0.1, m, grads));
                        }
                    }
                }
                assert!(!ddp.has_accumulated());
                let last = params_to_flat(ddp.module()).unwrap();
                assert_ne!(last, fixed, "training changed nothing");
                (ddp.buckets_on_device(), last)
            })
        })
    };
    let host = run(BucketMemory::Host);
    let device = run(BucketMemory::Device);
    // On the CPU, Auto keeps host buckets; Device keeps tensors, averaged through the host.
    assert_eq!(host[0].0, None);
    assert_eq!(device[0].0, Some(false));
    assert_eq!(run(BucketMemory::Auto)[0].0, None);
    assert_eq!(device[0].1, device[1].1, "device-bucket replicas differ");
    assert_eq!(
        host[0].1, device[0].1,
        "device buckets differ from host buckets"
    );
}

#[test]
fn device_buckets_refuse_a_host_hook() {
    let errors = with_deadline(|| {
        spawn_ranks(2, |pg| {
            let options = DdpOptions::default()
                .with_comm_hook(Bf16CompressHook)
                .with_bucket_memory(BucketMemory::Device);
            DistributedDataParallel::new(Net::new(4, &device()), Arc::new(pg), options)
                .err()
                .map(|e| e.to_string())
        })
    });
    for e in errors {
        let e = e.expect("device buckets with the bf16 hook must be refused");
        assert!(e.contains("bf16_compress") && e.contains("host"), "{e}");
    }
}
