//! The seed model and its single-process training step.

use phalanx_ddp::adapter::burn::{param_infos, params_to_flat};
use phalanx_train::{
    device, evaluate, param_digest, train_step_local, Mlp, MlpConfig, Optim, OptimOptions,
};

/// A linearly separable toy problem: the label is the index of the largest of the first
/// `classes` features.
fn toy(n: usize, input: usize, classes: usize, seed: u64) -> (Vec<f32>, Vec<i64>) {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
    };
    let x: Vec<f32> = (0..n * input).map(|_| next()).collect();
    let y = x
        .chunks(input)
        .map(|row| {
            let head = &row[..classes];
            (0..classes)
                .max_by(|&a, &b| head[a].total_cmp(&head[b]))
                .unwrap() as i64
        })
        .collect();
    (x, y)
}

#[test]
fn parameters_follow_the_seed_recipe_layout() {
    let config = MlpConfig::seed(64, 10).with_depth(2).with_hidden(32);
    let model = Mlp::new(&config, 0, &device());
    let infos = param_infos(&model);
    let names: Vec<&str> = infos.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "layers.0.weight",
            "layers.0.bias",
            "layers.1.weight",
            "layers.1.bias",
            "layers.2.weight",
            "layers.2.bias"
        ]
    );
    assert_eq!(infos[0].shape, vec![64, 32]);
    assert_eq!(infos[4].shape, vec![32, 10]);
    assert_eq!(
        infos.iter().map(|i| i.numel()).sum::<usize>(),
        config.num_params()
    );
    // nn.Linear's default bound, 1/sqrt(fan_in).
    let values = params_to_flat(&model).unwrap();
    assert!(values[0].iter().all(|v| v.abs() < 1.0 / 8.0));
    assert!(values[2].iter().all(|v| v.abs() < 1.0 / 32f32.sqrt()));
}

#[test]
fn same_seed_gives_identical_parameters_and_digest() {
    let config = MlpConfig::seed(20, 3);
    let a = Mlp::new(&config, 42, &device());
    let b = Mlp::new(&config, 42, &device());
    let c = Mlp::new(&config, 43, &device());
    assert_eq!(params_to_flat(&a).unwrap(), params_to_flat(&b).unwrap());
    let digest = param_digest(&a).unwrap();
    assert_eq!(digest.len(), 64);
    assert_eq!(digest, param_digest(&b).unwrap());
    assert_ne!(digest, param_digest(&c).unwrap());
}

#[test]
fn same_seed_same_batches_give_bitwise_identical_training() {
    let config = MlpConfig::seed(16, 4).with_hidden(24);
    let (x, y) = toy(64, 16, 4, 1);
    let run = || {
        let mut model = Mlp::new(&config, 7, &device());
        let mut opt = Optim::new(OptimOptions {
            momentum: 0.9,
            weight_decay: 1e-4,
            ..Default::default()
        });
        for (xb, yb) in x.chunks(16 * 16).zip(y.chunks(16)) {
            model = train_step_local(model, &mut opt, xb, yb).unwrap().0;
        }
        param_digest(&model).unwrap()
    };
    assert_eq!(run(), run());
}

#[test]
fn training_learns_a_separable_problem() {
    let (input, classes) = (12, 3);
    let config = MlpConfig::seed(input, classes).with_hidden(32);
    let (x, y) = toy(600, input, classes, 3);
    let (tx, ty) = toy(300, input, classes, 4);
    let mut model = Mlp::new(&config, 0, &device());
    let mut opt = Optim::new(OptimOptions {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    });
    let before = evaluate(&model, &tx, &ty).unwrap();
    let mut first_loss = None;
    let mut last_loss = 0.0;
    for _ in 0..30 {
        for (xb, yb) in x.chunks(32 * input).zip(y.chunks(32)) {
            let (m, loss) = train_step_local(model, &mut opt, xb, yb).unwrap();
            model = m;
            first_loss.get_or_insert(loss);
            last_loss = loss;
        }
    }
    let after = evaluate(&model, &tx, &ty).unwrap();
    assert!(
        last_loss < first_loss.unwrap() * 0.5,
        "loss {first_loss:?} -> {last_loss}"
    );
    assert!(
        after > before && after >= 270,
        "accuracy {before}/300 -> {after}/300"
    );
}

#[test]
fn evaluate_rejects_mismatched_batches() {
    let model = Mlp::new(&MlpConfig::seed(4, 2), 0, &device());
    assert!(evaluate(&model, &[0.0; 7], &[0, 1]).is_err());
    assert!(train_step_local(
        model,
        &mut Optim::new(OptimOptions::default()),
        &[0.0; 4],
        &[0, 1]
    )
    .is_err());
}
