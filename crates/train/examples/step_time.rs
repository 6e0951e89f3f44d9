//! Times the phases of one training step of an MLP on Burn's flex backend, single process:
//! forward+backward, gradients to flat f32 (what DDP packs), and the SGD update.
//!
//! `cargo run -p phalanx-train --example step_time -- [hidden] [depth] [batch] [steps]`
//! (defaults: the communication-heavy 784-2048-2048-10 at batch 64).

use std::time::{Duration, Instant};

use burn::optim::GradientsParams;
use phalanx_ddp::adapter::burn::GradTable;
use phalanx_train::{device, forward_backward, Mlp, MlpConfig, Optim, OptimOptions};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let arg = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
    let (hidden, depth, batch, steps) = (arg(0, 2048), arg(1, 2), arg(2, 64), arg(3, 30));
    let config = MlpConfig::seed(784, 10)
        .with_hidden(hidden)
        .with_depth(depth);
    let mut model = Mlp::new(&config, 0, &device());
    let mut opt = Optim::new(OptimOptions::default());
    let x: Vec<f32> = (0..batch * 784)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let y: Vec<i64> = (0..batch).map(|i| (i % 10) as i64).collect();
    let (mut fb, mut flat, mut back, mut upd) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for step in 0..steps + 3 {
        let t0 = Instant::now();
        let (mut grads, _loss) = forward_backward(&model, &x, &y).unwrap();
        let t1 = Instant::now();
        let table = GradTable::new(&model);
        let bufs: Vec<Vec<f32>> = table
            .infos()
            .enumerate()
            .map(|(i, info)| {
                let mut buf = vec![0.0; info.numel()];
                table.grad_into(i, &mut grads, &mut buf, false).unwrap();
                buf
            })
            .collect();
        let t2 = Instant::now();
        let mut params = GradientsParams::new();
        for (i, b) in bufs.into_iter().enumerate() {
            table.register_grad(i, b, &mut params);
        }
        let t3 = Instant::now();
        model = opt.step(model, params);
        let t4 = Instant::now();
        if step >= 3 {
            fb.push(t1 - t0);
            flat.push(t2 - t1);
            back.push(t3 - t2);
            upd.push(t4 - t3);
        }
    }
    let med = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e3
    };
    let (fb, flat, back, upd) = (med(&mut fb), med(&mut flat), med(&mut back), med(&mut upd));
    println!(
        "mlp 784-{hidden}x{depth}-10 batch {batch}: params {} ({:.1} MB) | forward+backward {fb:.2} ms | \
         grads->flat {flat:.2} ms | flat->grads {back:.2} ms | sgd {upd:.2} ms | total {:.2} ms",
        config.num_params(),
        config.num_params() as f64 * 4.0 / 1e6,
        fb + flat + back + upd
    );
}
