//! Data-parallel training throughput of the seed MLP (or the big one) on synthetic data: run one
//! process per rank under a launcher, e.g.
//! `phalanx launch --nproc-per-node 2 -- target/debug/examples/ddp_bench 2048 2 64 40`.
//!
//! Arguments: `[hidden] [depth] [batch per rank] [steps] [bf16]`. Rank 0 prints one JSON line.

use std::sync::Arc;
use std::time::{Duration, Instant};

use phalanx_ddp::{Bf16CompressHook, DdpOptions, DistributedDataParallel};
use phalanx_train::{device, train_step, Mlp, MlpConfig, Optim, OptimOptions};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: usize| {
        args.get(i)
            .map(|a| a.parse().expect("a number"))
            .unwrap_or(d)
    };
    let (hidden, depth, batch, steps) = (arg(0, 2048), arg(1, 2), arg(2, 64), arg(3, 40));
    let bf16 = args.get(4).is_some_and(|a| a == "bf16");
    let warmup = 5;

    let pg = Arc::new(phalanx_pg::init_process_group().expect("init_process_group"));
    let (rank, world) = (pg.rank(), pg.world_size());
    let config = MlpConfig::seed(784, 10)
        .with_hidden(hidden)
        .with_depth(depth);
    let mut options = DdpOptions::default();
    if bf16 {
        options = options.with_comm_hook(Bf16CompressHook);
    }
    let model = Mlp::new(&config, rank as u64, &device());
    let mut ddp = DistributedDataParallel::new(model, pg.clone(), options).expect("ddp");
    let mut opt = Optim::new(OptimOptions::default());
    let x: Vec<f32> = (0..batch * 784)
        .map(|i| (((i + rank * 13) * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let y: Vec<i64> = (0..batch).map(|i| ((i + rank) % 10) as i64).collect();

    let mut start = Instant::now();
    let mut wait0 = Duration::ZERO;
    let mut sync0 = Duration::ZERO;
    let mut loss = 0.0;
    for step in 0..warmup + steps {
        if step == warmup {
            pg.barrier().expect("barrier");
            start = Instant::now();
            wait0 = ddp.stats().wait;
            sync0 = ddp.stats().sync;
        }
        loss = train_step(&mut ddp, &mut opt, &x, &y).expect("step");
    }
    pg.barrier().expect("barrier");
    let elapsed = start.elapsed().as_secs_f64();
    let comm_wait = (ddp.stats().wait - wait0).as_secs_f64();
    let sync = (ddp.stats().sync - sync0).as_secs_f64();
    if rank == 0 {
        let line = serde_json::json!({
            "system": "phalanx-ddp",
            "world": world,
            "hidden": hidden,
            "depth": depth,
            "batch": batch,
            "steps": steps,
            "hook": ddp.options().comm_hook.name(),
            "step_ms": 1e3 * elapsed / steps as f64,
            "samples_per_s": (world * batch * steps) as f64 / elapsed,
            "comm_fraction": comm_wait / elapsed,
            "sync_ms": 1e3 * sync / steps as f64,
            "loss": loss,
        });
        println!("{line}");
    }
}
