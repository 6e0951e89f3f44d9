//! The seed model's data-parallel step on ranks as threads.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use phalanx_checkpoint::position::Position;
use phalanx_checkpoint::state_dict;
use phalanx_ddp::adapter::burn::{params_to_flat, set_params_from_flat};
use phalanx_ddp::{DdpOptions, DistributedDataParallel};
use phalanx_testing::spawn_ranks;
use phalanx_train::{
    accumulate_step, device, param_digest, train_step, train_step_local, Mlp, MlpConfig, Optim,
    OptimOptions, OptimizerKind,
};

const INPUT: usize = 16;

fn config() -> MlpConfig {
    MlpConfig::seed(INPUT, 4).with_hidden(24).with_depth(2)
}

fn rows(step: usize, first: usize, n: usize) -> (Vec<f32>, Vec<i64>) {
    let x = (first..first + n)
        .flat_map(|r| {
            (0..INPUT).map(move |c| (((step * 13 + r * 29 + c * 5) % 31) as f32 / 15.5) - 1.0)
        })
        .collect();
    let y = (first..first + n)
        .map(|r| ((r * 3 + step) % 4) as i64)
        .collect();
    (x, y)
}

fn with_deadline<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(120))
        .expect("ranks did not finish within the deadline")
}

fn options() -> OptimOptions {
    OptimOptions {
        lr: 0.05,
        momentum: 0.9,
        weight_decay: 1e-4,
        ..OptimOptions::default()
    }
}

#[test]
fn ranks_end_with_identical_digests_and_match_one_rank_of_double_batch() {
    let (b, steps) = (8, 6);
    let results = with_deadline(move || {
        spawn_ranks(2, move |pg| {
            let rank = pg.rank();
            // Different seeds per rank: the broadcast makes rank 0's parameters everyone's.
            let model = Mlp::new(&config(), 100 + rank as u64, &device());
            let mut ddp =
                DistributedDataParallel::new(model, Arc::new(pg), DdpOptions::default()).unwrap();
            let mut opt = Optim::new(options());
            for step in 0..steps {
                let (x, y) = rows(step, rank * b, b);
                let loss = train_step(&mut ddp, &mut opt, &x, &y).unwrap();
                assert!(loss.is_finite());
            }
            (
                param_digest(ddp.module()).unwrap(),
                params_to_flat(ddp.module()).unwrap(),
            )
        })
    });
    assert_eq!(results[0].0, results[1].0, "rank digests differ");

    // One process, the seed of rank 0, batches of 2b: the same model within float tolerance.
    let mut model = Mlp::new(&config(), 100, &device());
    let mut opt = Optim::new(options());
    for step in 0..steps {
        let (x, y) = rows(step, 0, 2 * b);
        model = train_step_local(model, &mut opt, &x, &y).unwrap().0;
    }
    let local = params_to_flat(&model).unwrap();
    let worst = results[0]
        .1
        .iter()
        .flatten()
        .zip(local.iter().flatten())
        .map(|(a, l)| (a - l).abs() / l.abs().max(1e-3))
        .fold(0f32, f32::max);
    assert!(worst < 1e-4, "largest relative difference {worst}");
}

#[test]
fn accumulation_keeps_ranks_identical() {
    let digests = with_deadline(|| {
        spawn_ranks(3, |pg| {
            let rank = pg.rank();
            let model = Mlp::new(&config(), rank as u64, &device());
            let mut ddp =
                DistributedDataParallel::new(model, Arc::new(pg), DdpOptions::default()).unwrap();
            let mut opt = Optim::new(OptimOptions::default());
            for step in 0..3 {
                let (x, y) = rows(2 * step, rank * 4, 4);
                accumulate_step(&mut ddp, &x, &y).unwrap();
                let (x, y) = rows(2 * step + 1, rank * 4, 4);
                train_step(&mut ddp, &mut opt, &x, &y).unwrap();
            }
            // Digest of the broadcast-initialised model path: set_params keeps training intact.
            let values = params_to_flat(ddp.module()).unwrap();
            let copy = set_params_from_flat(Mlp::new(&config(), 9, &device()), &values).unwrap();
            assert_eq!(
                param_digest(&copy).unwrap(),
                param_digest(ddp.module()).unwrap()
            );
            param_digest(ddp.module()).unwrap()
        })
    });
    assert!(digests.iter().all(|d| d == &digests[0]), "{digests:?}");
}

/// A checkpoint of a user's loop (`state_dict::save` on rank 0 of 2) resumed by 3 ranks
/// (`state_dict::load` on each) ends where the uninterrupted 2-rank run ends: the same global
/// batches (rows split 3+3, then 2+2+2), Adam's moments and step counts carried over (a fresh
/// Adam's first step after 3 would land elsewhere), the replicas bitwise equal.
#[test]
fn a_checkpoint_resumes_at_another_world_size_where_the_uninterrupted_run_ends() {
    const GLOBAL: usize = 6;
    let (save_after, steps) = (3, 5);
    let dir = std::env::temp_dir().join(format!("phalanx-sd-world-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let adam = || {
        Optim::new(OptimOptions {
            kind: OptimizerKind::Adam,
            lr: 0.01,
            ..OptimOptions::default()
        })
    };
    let run = |world: usize, resume: bool| {
        let dir = dir.clone();
        with_deadline(move || {
            spawn_ranks(world, |pg| {
                let rank = pg.rank();
                let b = GLOBAL / world;
                let mut model = Mlp::new(&config(), 100 + rank as u64, &device());
                let mut opt = adam();
                let mut first = 0;
                if resume {
                    let r = state_dict::load(&dir, &mut model, opt.inner_mut())
                        .unwrap()
                        .expect("rank 0 of the first run saved one");
                    assert_eq!(r.position.world, 2);
                    first = r.position.global_step as usize;
                }
                let mut ddp =
                    DistributedDataParallel::new(model, Arc::new(pg), DdpOptions::default())
                        .unwrap();
                for step in first..steps {
                    let (x, y) = rows(step, rank * b, b);
                    train_step(&mut ddp, &mut opt, &x, &y).unwrap();
                    if !resume && rank == 0 && step + 1 == save_after {
                        let at = Position {
                            global_step: save_after as u64,
                            step_in_epoch: save_after as u64,
                            samples_in_epoch: (save_after * GLOBAL) as u64,
                            world: world as u64,
                            ..Position::default()
                        };
                        state_dict::save(&dir, ddp.module(), opt.inner(), at).unwrap();
                    }
                }
                params_to_flat(ddp.module()).unwrap()
            })
        })
    };
    let whole = run(2, false);
    let resumed = run(3, true);
    assert!(resumed.iter().all(|p| p == &resumed[0]), "replicas differ");
    let worst = whole[0]
        .iter()
        .flatten()
        .zip(resumed[0].iter().flatten())
        .map(|(a, r)| (a - r).abs() / a.abs().max(1e-3))
        .fold(0f32, f32::max);
    assert!(worst < 1e-4, "largest relative difference {worst}");
    std::fs::remove_dir_all(&dir).unwrap();
}
