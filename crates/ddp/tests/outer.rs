//! The outer sync across islands (Note [Outer sync]): what local SGD and DiLoCo's Nesterov
//! step make of known island parameters, the quantized dtypes' bound, and the options that
//! cannot work, named.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::Device;
use phalanx_ddp::outer::{DiLoCo, OuterDType, OuterOptions};
use phalanx_ddp::{DataParallel, DdpOptions, DistributedDataParallel};

#[derive(Module, Debug)]
struct Net {
    fc: Linear,
    head: Linear,
}

fn net(device: &Device) -> Net {
    Net {
        fc: LinearConfig::new(40, 30).init(device),
        head: LinearConfig::new(30, 3).init(device),
    }
}

/// Island `k`'s drift from the global parameters before sync `s`: each element its own, the
/// islands apart, some elements far larger than the rest (as a pseudo-gradient's are).
fn drift(k: usize, s: usize, i: usize) -> f32 {
    let x = ((i * 7919 + k * 104_729 + s * 1_299_709) % 1000) as f32 / 1000.0 - 0.5;
    if i.is_multiple_of(97) {
        x
    } else {
        x * 0.01
    }
}

/// A model's values: each float tensor, flat.
type Values = Vec<Vec<f32>>;

/// On 4 ranks in 2 islands of 2: each island's parameters set to the global ones plus its
/// drift, then synced, `syncs` times. Returns every rank's parameters after each sync, and the
/// first global parameters.
fn run(options: OuterOptions, syncs: usize) -> Vec<(Vec<Values>, Values)> {
    phalanx_testing::spawn_ranks(4, |pg| {
        let device = Device::flex().autodiff();
        let mut diloco = DiLoCo::new(&pg, options.clone().with_island_size(Some(2))).unwrap();
        let island = diloco.island().clone();
        // Each island builds its own model: start gives every island island 0's.
        let mut ddp =
            DistributedDataParallel::new(net(&device), island, DdpOptions::default()).unwrap();
        diloco.start(&mut ddp).unwrap();
        let first = ddp.full_params().unwrap();
        let (k, islands) = diloco.island_index();
        assert_eq!(islands, 2);
        let mut after = Vec::new();
        for s in 0..syncs {
            let mut values = ddp.full_params().unwrap();
            for (i, v) in values.iter_mut().flatten().enumerate() {
                *v += drift(k, s, i);
            }
            ddp.set_full_params(&values).unwrap();
            diloco.sync(&mut ddp).unwrap();
            after.push(ddp.full_params().unwrap());
        }
        assert_eq!(diloco.stats().syncs, syncs as u64);
        (after, first)
    })
}

fn flat(values: &[Vec<f32>]) -> Vec<f32> {
    values.iter().flatten().copied().collect()
}

#[test]
fn every_rank_of_every_island_ends_equal_and_islands_start_from_island_0() {
    let results = run(OuterOptions::diloco(1), 2);
    for (after, first) in &results {
        assert_eq!(
            *after, results[0].0,
            "every rank holds the same global parameters"
        );
        assert_eq!(*first, results[0].1, "every island starts from island 0's");
    }
}

/// The mean drift of the two islands before sync `s`: the negated pseudo-gradient.
fn mean_drift(s: usize, i: usize) -> f64 {
    (drift(0, s, i) as f64 + drift(1, s, i) as f64) / 2.0
}

#[test]
fn local_sgd_is_the_islands_mean_and_diloco_a_nesterov_step_of_it() {
    let (lr, mu) = (0.7f64, 0.9f64);
    for (options, what) in [
        (OuterOptions::local_sgd(1), "local SGD"),
        (
            OuterOptions::diloco(1).with_outer_optimizer(lr as f32, mu as f32),
            "DiLoCo",
        ),
    ] {
        let diloco = what == "DiLoCo";
        let results = run(options, 2);
        // By hand in f64, from the run's own first parameters.
        let mut theta: Vec<f64> = flat(&results[0].1).iter().map(|&v| v as f64).collect();
        let mut b = vec![0.0f64; theta.len()];
        for s in 0..2 {
            for (i, t) in theta.iter_mut().enumerate() {
                let g = -mean_drift(s, i);
                match diloco {
                    true => {
                        b[i] = mu * b[i] + g;
                        *t -= lr * (g + mu * b[i]);
                    }
                    false => *t -= g,
                }
            }
            let got = flat(&results[0].0[s]);
            for (i, (g, want)) in got.iter().zip(&theta).enumerate() {
                assert!(
                    (*g as f64 - want).abs() < 1e-5,
                    "{what}, sync {s}, element {i}: {g} against {want} by hand"
                );
            }
        }
    }
}

#[test]
fn quantized_dtypes_are_equal_everywhere_and_within_their_bound() {
    let n = net(&Device::flex()).num_params();
    let largest = (0..n)
        .map(|i| drift(0, 0, i).abs().max(drift(1, 0, i).abs()))
        .fold(0.0f32, f32::max);
    for dtype in [OuterDType::Bf16, OuterDType::Int8, OuterDType::Fp4] {
        let results = run(OuterOptions::local_sgd(1).with_dtype(dtype), 1);
        for (after, _) in &results {
            assert_eq!(
                *after, results[0].0,
                "{dtype}: every rank decodes the same bytes"
            );
        }
        // Note [Outer dtype error]: the islands' rounding, then the mean's, each bounded by
        // the block's largest magnitude (here at most the largest drift).
        let bound =
            2.0 * match dtype {
                OuterDType::Bf16 => largest / 256.0,
                OuterDType::Int8 => largest / 254.0,
                _ => largest / 6.0,
            } + 1e-6;
        let exact = flat(&results[0].1)
            .iter()
            .enumerate()
            .map(|(i, &v)| (v as f64 + mean_drift(0, i)) as f32)
            .collect::<Vec<_>>();
        let got = flat(&results[0].0[0]);
        let worst = got
            .iter()
            .zip(&exact)
            .map(|(g, e)| (g - e).abs())
            .fold(0.0f32, f32::max);
        assert!(worst <= bound, "{dtype}: off by {worst}, bound {bound}");
        assert!(worst > 0.0, "{dtype}: quantized, so not exact");
    }
}

#[test]
fn options_that_cannot_work_are_named() {
    let errors = phalanx_testing::spawn_ranks(4, |pg| {
        let e = |o: OuterOptions| DiLoCo::new(&pg, o).unwrap_err().to_string();
        [
            e(OuterOptions::diloco(10).with_island_size(Some(3))),
            e(OuterOptions::diloco(0).with_island_size(Some(2))),
            e(OuterOptions::diloco(10).with_outer_optimizer(0.7, 1.0)),
            e(OuterOptions::diloco(10).with_outer_optimizer(-1.0, 0.9)),
        ]
    });
    let [islands, never, momentum, lr] = &errors[0];
    assert!(
        islands.contains("island of 3 ranks") && islands.contains("--island-size 1, 2, 4"),
        "{islands}"
    );
    assert!(
        never.contains("--sync-every") && never.contains("never meet"),
        "{never}"
    );
    assert!(
        momentum.contains("--outer-momentum") && momentum.contains("below 1"),
        "{momentum}"
    );
    assert!(lr.contains("--outer-lr") && lr.contains("positive"), "{lr}");
}
