//! Your own Burn model, fully sharded (ZeRO-3, FSDP2's `fully_shard`): each rank keeps a shard
//! of the parameters, gradients and Adam's state, and gathers a block's parameters only while
//! that block computes. `docs/sharding.md` has the rest.
//!
//! ```sh
//! cargo build --release -p phalanx-examples --example sharded_model
//! phalanx launch --standalone --nproc-per-node 2 -- target/release/examples/sharded_model
//! ```

use std::sync::Arc;

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::AdamConfig;
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use phalanx_ddp::fsdp::{seed_step, FsdpOptions, FullyShard, FullyShardedDataParallel, Sharding};
use phalanx_examples::teacher_batch;

/// Blocks wrapped like `fully_shard(layer)`; the head is the root's (gathered by `unshard`).
#[derive(Module, Debug)]
struct Net {
    blocks: Vec<FullyShard<Linear>>,
    head: Linear,
}

impl Net {
    fn new(device: &Device) -> Net {
        device.seed(0); // the same values on every rank (rank 0's are broadcast anyway)
        Net {
            blocks: [(32, 256), (256, 256), (256, 256)]
                .into_iter()
                .map(|(i, o)| FullyShard::new(LinearConfig::new(i, o).init(device)))
                .collect(),
            head: LinearConfig::new(256, 4).init(device),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        // The closure is the block's forward; it runs inside the block's gather.
        let x = self
            .blocks
            .iter()
            .fold(x, |x, b| relu(b.forward(x, |l: &Linear, x| l.forward(x))));
        self.head.forward(x)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pg = Arc::new(phalanx_pg::init_process_group()?); // RANK, WORLD_SIZE… from any launcher
    pg.abort_on_panic();
    let device = Device::flex().autodiff();
    let options = FsdpOptions::new(Sharding::Full);
    let mut fsdp = FullyShardedDataParallel::new(Net::new(&device), pg.clone(), options)?;
    let mut optim = AdamConfig::new().init(); // Burn's own Adam: its state is this rank's shard
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    for step in 0..200 {
        seed_step(&device, step as u64);
        fsdp.unshard()?; // the root's parameters (the head); the blocks gather their own
        let (x, y) = teacher_batch(step, pg.rank(), &device);
        let loss = loss_fn.forward(fsdp.module().forward(x), y);
        let value = loss.clone().into_scalar::<f32>();
        fsdp.sync_and_step(loss.backward(), |shard, g| optim.step(1e-3, shard, g))?;
        if pg.rank() == 0 && step % 50 == 0 {
            println!("step {step}: loss {value:.4}");
        }
    }
    let owned = fsdp.ownership().owned_by(fsdp.shard_group().rank());
    let total: usize = fsdp.param_infos().iter().map(|i| i.numel()).sum();
    let values = fsdp.full_params()?; // gathered from every rank's shard
    let digest: f64 = values.iter().flatten().map(|&v| f64::from(v)).sum();
    println!(
        "rank {}: held {owned} of {total} parameter elements; parameters sum {digest:.6}",
        pg.rank()
    );
    Ok(())
}
