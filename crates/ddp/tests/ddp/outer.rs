//! The outer sync across islands (Note [Outer sync]): what local SGD and DiLoCo's Nesterov
//! step make of known island parameters, the quantized dtypes' bound, and the options that
//! cannot work, named.

use std::sync::Arc;

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::Device;
use phalanx_ddp::fsdp::{FsdpOptions, FullyShardedDataParallel, Sharding};
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

/// This rank's outer sync in islands of 2, and DDP on its island.
fn islands<E>(
    pg: &phalanx_pg::ProcessGroup,
    options: &OuterOptions,
    engine: Engine<E>,
) -> (DiLoCo, E) {
    let device = Device::flex().autodiff();
    let diloco = DiLoCo::new(pg, options.clone().with_island_size(Some(2))).unwrap();
    let island = diloco.island().clone();
    let engine = engine(net(&device), island);
    (diloco, engine)
}

/// How an island wraps its model.
type Engine<E> = fn(Net, Arc<phalanx_pg::ProcessGroup>) -> E;

fn ddp(net: Net, island: Arc<phalanx_pg::ProcessGroup>) -> DistributedDataParallel<Net> {
    DistributedDataParallel::new(net, island, DdpOptions::default()).unwrap()
}

/// FSDP inside the islands: each rank holds its shard of the island's model.
fn fsdp(net: Net, island: Arc<phalanx_pg::ProcessGroup>) -> FullyShardedDataParallel<Net> {
    FullyShardedDataParallel::new(net, island, FsdpOptions::new(Sharding::Full)).unwrap()
}

/// On 4 ranks in 2 islands of 2: each island's parameters set to the global ones plus its
/// drift, then synced, `syncs` times. Returns every rank's parameters after each sync, and the
/// first global parameters.
fn run(options: OuterOptions, syncs: usize) -> Vec<(Vec<Values>, Values)> {
    phalanx_testing::spawn_ranks(4, |pg| {
        // Each island builds its own model: start gives every island island 0's.
        let (mut diloco, mut ddp) = islands(&pg, &options, ddp);
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
            // One inner step (the drift) and its sync (sync_every 1).
            assert!(diloco.step(&mut ddp).unwrap());
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

/// On 4 ranks in 2 islands of 2: `steps` inner steps, each adding island `k`'s drift of that
/// step to its parameters, with `options`' outer syncs, then the end-of-run sync. Returns each
/// rank's parameters at the end, its stats, and the first global parameters.
fn train(
    options: OuterOptions,
    steps: usize,
) -> Vec<(Values, phalanx_ddp::outer::OuterStats, Values)> {
    train_losing_island_1(&options, steps, None, ddp)
}

/// As [`train`], but with `lost_at`, island 1 loses everything after that step and comes back
/// with a model of its own, healing from island 0 in a new mesh (as after a regroup).
fn train_losing_island_1<E: DataParallel<Net>>(
    options: &OuterOptions,
    steps: usize,
    lost_at: Option<usize>,
    engine: Engine<E>,
) -> Vec<(Values, phalanx_ddp::outer::OuterStats, Values)> {
    phalanx_testing::spawn_ranks(4, |pg| {
        let (mut diloco, mut ddp) = islands(&pg, options, engine);
        // The same first parameters in every run, for runs to be compared bit for bit.
        let mut values = ddp.full_params().unwrap();
        for (i, v) in values.iter_mut().flatten().enumerate() {
            *v = ((i * 31) % 100) as f32 / 1000.0 - 0.05;
        }
        ddp.set_full_params(&values).unwrap();
        diloco.start(&mut ddp).unwrap();
        let first = ddp.full_params().unwrap();
        let (k, _) = diloco.island_index();
        for t in 1..=steps {
            if lost_at.is_some_and(|at| t == at + 1) {
                let state = diloco.into_state();
                let kept = ddp.full_params().unwrap();
                (diloco, ddp) = islands(&pg, options, engine);
                if k == 0 {
                    // Island 0 goes on with its own parameters in its new engine.
                    ddp.set_full_params(&kept).unwrap();
                }
                let state = match k {
                    0 => state,
                    _ => None,
                };
                diloco.heal(&mut ddp, state, k == 1, t as u64 - 1).unwrap();
                assert!(
                    !diloco.settle(&mut ddp).unwrap(),
                    "nothing owed at a boundary"
                );
            }
            let mut values = ddp.full_params().unwrap();
            for (i, v) in values.iter_mut().flatten().enumerate() {
                *v += drift(k, t, i);
            }
            ddp.set_full_params(&values).unwrap();
            diloco.step(&mut ddp).unwrap();
        }
        if diloco.is_apart() {
            diloco.sync(&mut ddp).unwrap();
        }
        assert!(!diloco.is_apart());
        (ddp.full_params().unwrap(), diloco.stats(), first)
    })
}

/// Streaming DiLoCo by hand in f64 (Note [Streaming fragments]): two islands, `count`
/// fragments in element order, each sync's pseudo-gradient taken `delay` steps before it
/// ends, `alpha` of the islands' progress kept, and the end-of-run sync.
fn streaming_by_hand(
    first: &[f32],
    (h, count, delay, alpha): (usize, usize, usize, f64),
    steps: usize,
) -> (Vec<f64>, usize) {
    let (lr, mu) = (0.7f64, 0.9f64);
    let n = first.len();
    let fragment = |f: usize| f * n / count..(f + 1) * n / count;
    let mut global: Vec<f64> = first.iter().map(|&v| v as f64).collect();
    let mut local = [global.clone(), global.clone()];
    let mut b = vec![0.0f64; n];
    let mut dirty = vec![false; count];
    let mut pending: Option<(usize, [Vec<f64>; 2])> = None;
    let mut syncs = 0;
    let mut end = |f: usize,
                   deltas: [Vec<f64>; 2],
                   alpha: f64,
                   global: &mut Vec<f64>,
                   local: &mut [Vec<f64>; 2],
                   dirty: &mut Vec<bool>| {
        for (x, i) in fragment(f).enumerate() {
            let d = (deltas[0][x] + deltas[1][x]) / 2.0;
            b[i] = mu * b[i] + d;
            global[i] -= lr * (d + mu * b[i]);
            for l in local.iter_mut() {
                l[i] = global[i] + alpha * (l[i] - global[i]);
            }
        }
        dirty[f] = alpha != 0.0;
        syncs += 1;
    };
    let deltas = |f: usize, global: &[f64], local: &[Vec<f64>; 2]| {
        [0, 1].map(|k| {
            fragment(f)
                .map(|i| global[i] - local[k][i])
                .collect::<Vec<_>>()
        })
    };
    let cadence = h / count;
    for t in 1..=steps {
        for (k, l) in local.iter_mut().enumerate() {
            for (i, v) in l.iter_mut().enumerate() {
                *v += drift(k, t, i) as f64;
            }
        }
        dirty.iter_mut().for_each(|d| *d = true);
        if (t + delay).is_multiple_of(cadence) {
            let f = ((t + delay) / cadence - 1) % count;
            pending = Some((f, deltas(f, &global, &local)));
        }
        if t.is_multiple_of(cadence) {
            let (f, d) = pending.take().unwrap();
            end(f, d, alpha, &mut global, &mut local, &mut dirty);
        }
    }
    if let Some((f, d)) = pending.take() {
        end(f, d, alpha, &mut global, &mut local, &mut dirty);
    }
    for f in 0..count {
        if dirty[f] {
            let d = deltas(f, &global, &local);
            end(f, d, 0.0, &mut global, &mut local, &mut dirty);
        }
    }
    (global, syncs)
}

#[test]
fn streaming_diloco_with_one_fragment_and_no_overlap_is_diloco_bitwise() {
    let diloco = train(OuterOptions::diloco(4), 10);
    let streaming = train(OuterOptions::streaming_diloco(4, 1), 10);
    for (d, s) in diloco.iter().zip(&streaming) {
        assert_eq!(d.0, s.0, "the same parameters, bit for bit");
        assert_eq!(d.1.syncs, s.1.syncs);
        assert_eq!(d.1.bytes_across, s.1.bytes_across);
    }
    // 2 syncs in the run and the end-of-run sync of the 2 steps after the last.
    assert_eq!(diloco[0].1.syncs, 3);
}

#[test]
fn streaming_fragments_sync_in_turn_overlapped_as_by_hand_and_end_equal_everywhere() {
    let (h, count, steps) = (8, 4, 21);
    for (delay, alpha) in [(0u64, 0.0f32), (1, 0.0), (1, 0.5)] {
        let options = OuterOptions::streaming_diloco(h, count).with_fragment_delay(delay, alpha);
        let results = train(options, steps);
        for (params, stats, _) in &results {
            assert_eq!(
                *params, results[0].0,
                "delay {delay} alpha {alpha}: every rank ends on the global parameters"
            );
            assert_eq!(stats.syncs, results[0].1.syncs);
        }
        let first = flat(&results[0].2);
        let (want, syncs) = streaming_by_hand(
            &first,
            (h as usize, count, delay as usize, alpha as f64),
            steps,
        );
        let got = flat(&results[0].0);
        let worst = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (*g as f64 - w).abs())
            .fold(0.0f64, f64::max);
        assert!(
            worst < 1e-4,
            "delay {delay} alpha {alpha}: off the hand-made run by {worst}"
        );
        assert_eq!(
            results[0].1.syncs, syncs as u64,
            "delay {delay} alpha {alpha}"
        );
        // A fragment's sync carries a quarter of what the whole model's would.
        let whole = train(OuterOptions::diloco(h), 1)[0].1.bytes_across;
        let per_sync = results[0].1.bytes_across as f64 / syncs as f64;
        assert!(
            (per_sync / whole as f64 - 0.25).abs() < 0.01,
            "a fragment's sync sends {per_sync} bytes, the whole model's {whole}"
        );
    }
}

#[test]
fn fragment_schedules_that_cannot_work_are_named() {
    let e = |o: OuterOptions| o.check_alone().unwrap_err().to_string();
    let zero = e(OuterOptions::streaming_diloco(8, 0));
    assert!(zero.contains("--fragments 0"), "{zero}");
    let odd = e(OuterOptions::streaming_diloco(10, 4));
    assert!(
        odd.contains("--sync-every 10 is not a multiple of --fragments 4")
            && odd.contains("--sync-every 12 or 8"),
        "{odd}"
    );
    let late = e(OuterOptions::streaming_diloco(8, 4).with_fragment_delay(2, 0.0));
    assert!(
        late.contains("--fragment-delay 2") && late.contains("use at most 1"),
        "{late}"
    );
    let alpha = e(OuterOptions::streaming_diloco(8, 4).with_fragment_delay(1, 1.5));
    assert!(alpha.contains("--fragment-alpha 1.5"), "{alpha}");
    let other = e(OuterOptions::diloco(8).with_fragment_delay(1, 0.0));
    assert!(
        other.contains("--fragment-delay") && other.contains("streaming-diloco"),
        "{other}"
    );
}

#[test]
fn an_island_rebuilt_from_nothing_heals_from_its_peer_and_the_run_goes_on_bitwise() {
    // At a DiLoCo boundary every island holds the global parameters: an island that lost
    // everything and healed is the undisturbed one, bit for bit.
    let options = OuterOptions::diloco(4);
    let (steps, lost_at) = (14, 8);
    let undisturbed = train(options.clone(), steps);
    let healed = train_losing_island_1(&options, steps, Some(lost_at), ddp);
    for ((params, healed, _), (want, stats, _)) in healed.iter().zip(&undisturbed) {
        assert_eq!(
            healed.syncs, stats.syncs,
            "the healed island counts the syncs it missed"
        );
        assert_eq!(
            params, want,
            "healed at a boundary, the run is the undisturbed one bit for bit"
        );
    }
}

#[test]
fn a_streaming_island_that_heals_mid_schedule_ends_equal_to_the_others() {
    // Under streaming DiLoCo some fragments are always moving: the healed island starts from
    // the global parameters, without its own progress on them, and still ends equal.
    let options = OuterOptions::streaming_diloco(4, 2).with_fragment_delay(1, 0.5);
    let healed = train_losing_island_1(&options, 15, Some(8), ddp);
    for (params, stats, _) in &healed {
        assert_eq!(
            *params, healed[0].0,
            "every rank ends on the global parameters"
        );
        assert_eq!(stats.syncs, healed[0].1.syncs);
    }
    let undisturbed = train(options, 15);
    assert_eq!(healed[0].1.syncs, undisturbed[0].1.syncs, "the same syncs");
    assert_ne!(
        healed[0].0, undisturbed[0].0,
        "island 1's progress on fragment 0 was lost"
    );
}

#[test]
fn fsdp_inside_the_islands_syncs_as_ddp_does_bit_for_bit() {
    // The outer sync reads and sets the whole parameters: each rank's FSDP shard takes its
    // pieces of them, and the run is the DDP islands' run bit for bit.
    for options in [
        OuterOptions::diloco(4),
        OuterOptions::streaming_diloco(4, 2).with_fragment_delay(1, 0.5),
    ] {
        let sharded = train_losing_island_1(&options, 10, None, fsdp);
        let replicated = train(options.clone(), 10);
        for (s, r) in sharded.iter().zip(&replicated) {
            assert_eq!(s.0, r.0, "{options:?}");
            assert_eq!(s.1.syncs, r.1.syncs);
        }
    }
}
