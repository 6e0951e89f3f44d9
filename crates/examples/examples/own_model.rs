//! Tutorial: your own Burn model, trained data-parallel with phalanx.
//!
//! A user-defined module with BatchNorm, the user's own training loop, PyTorch's
//! `DistributedSampler`, `DistributedDataParallel`, Adam, and a crash-safe checkpoint of the
//! model and Adam's state (one call to save it, one to load it) that the next run resumes
//! from, at any world size. It runs as one process:
//!
//! ```sh
//! cargo run --release -p phalanx-examples --example own_model
//! ```
//!
//! and unchanged on any number of processes under a launcher (`phalanx launch`, torchrun,
//! mpirun or srun set RANK, WORLD_SIZE, MASTER_ADDR…):
//!
//! ```sh
//! cargo build --release -p phalanx-examples --example own_model
//! phalanx launch --nproc-per-node 2 -- target/release/examples/own_model --epochs 3
//! ```
//!
//! Flags: `--epochs N` (default 2), `--checkpoint-dir DIR` (default `own_model_ckpt` in the
//! system's temporary directory; a second run resumes from its newest checkpoint), `--fresh`
//! (ignore existing checkpoints).

use std::{path::PathBuf, sync::Arc};

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};
use burn::optim::AdamConfig;
use burn::tensor::activation::relu;
use burn::tensor::{Device, Int, Tensor, TensorData};
use phalanx_checkpoint::position::Position;
use phalanx_checkpoint::state_dict;
use phalanx_core::ReduceOp;
use phalanx_data::{DataLoader, DistributedSampler};
use phalanx_ddp::adapter::burn::params_to_flat;
use phalanx_ddp::{DdpOptions, DistributedDataParallel};

// 1. The model: any Burn module. BatchNorm's running statistics are buffers: DDP keeps them
//    equal on every rank (rank 0's values after every step), gradients travel only for the
//    trainable parameters.
#[derive(Module, Debug)]
struct Net {
    conv: Conv2d,
    bn: BatchNorm,
    pool: MaxPool2d,
    fc: Linear,
}

impl Net {
    fn new(device: &Device) -> Net {
        Net {
            conv: Conv2dConfig::new([1, 8], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device),
            bn: BatchNormConfig::new(8).init(device),
            pool: MaxPool2dConfig::new([4, 4]).with_strides([4, 4]).init(),
            fc: LinearConfig::new(8 * 7 * 7, 10).init(device),
        }
    }

    fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        let x = self
            .pool
            .forward(relu(self.bn.forward(self.conv.forward(images))));
        let [batch, ..] = x.dims();
        self.fc.forward(x.reshape([batch, 8 * 7 * 7]))
    }
}

struct Flags {
    epochs: u64,
    checkpoint_dir: PathBuf,
    fresh: bool,
}

fn flags() -> Result<Flags, String> {
    let mut f = Flags {
        epochs: 2,
        checkpoint_dir: std::env::temp_dir().join("own_model_ckpt"),
        fresh: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--epochs" => {
                let v = args.next().unwrap_or_default();
                f.epochs = v
                    .parse()
                    .map_err(|_| format!("--epochs {v:?}: expected a number"))?;
            }
            "--checkpoint-dir" => {
                f.checkpoint_dir = args.next().ok_or("--checkpoint-dir needs a path")?.into()
            }
            "--fresh" => f.fresh = true,
            other => {
                return Err(format!(
                    "unknown flag {other:?}: expected --epochs N, --checkpoint-dir DIR, --fresh"
                ))
            }
        }
    }
    Ok(f)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let flags = flags()?;
    // 2. The process group: from the launcher's environment, or a group of one without it.
    //    A panic anywhere in this process now fails the whole job at once, naming this rank
    //    and the panic's file and line, instead of leaving the other ranks to time out.
    let pg = Arc::new(phalanx_pg::init_process_group()?);
    pg.abort_on_panic();
    let (rank, world) = (pg.rank(), pg.world_size());

    // 3. Data: the MNIST sample shipped with phalanx, a held-out test split, and each rank's
    //    share of every epoch from PyTorch's DistributedSampler (same seed on every rank).
    let data = phalanx_data::mnist5k()?;
    let (train, test) = data.split(0.2, 0)?;
    let train = Arc::new(train);
    let sampler = DistributedSampler::new(train.len(), world, rank)?.with_seed(0);

    // 4. Model and optimizer, then the newest checkpoint, if any, loaded into both in one
    //    call: the model's tensors, BatchNorm's statistics included, Adam's state, and where
    //    the loop stood. Every rank reads it (one host, or a shared filesystem); DDP's
    //    construction broadcasts rank 0's values. It was written whole, so any world size
    //    resumes it.
    let device = Device::flex().autodiff();
    let mut model = Net::new(&device);
    let mut optim = AdamConfig::new().with_epsilon(1e-8).init();
    let mut at = Position {
        world: world as u64,
        ..Position::default()
    };
    if !flags.fresh {
        if let Some(resumed) = state_dict::load(&flags.checkpoint_dir, &mut model, &mut optim)? {
            // The steps counted on; this run's world size consumes the next epoch.
            at = Position {
                world: world as u64,
                ..resumed.position
            };
            if rank == 0 {
                println!("resumed from epoch {}", at.epoch);
            }
        }
    }

    // 5. DDP: checks that every rank built the same model, broadcasts rank 0's parameters and
    //    buffers.
    let mut ddp = DistributedDataParallel::new(model, pg.clone(), DdpOptions::default())?;
    let loss_fn = CrossEntropyLossConfig::new().init(&device);

    // 6. The loop: forward, backward, gradients averaged over ranks, optimizer step.
    for epoch in at.epoch..flags.epochs {
        let loader = DataLoader::new(train.clone(), sampler.indices(epoch), 32)?;
        let mut loss_sum = 0.0;
        for batch in loader.iter() {
            let (x, y) = tensors(&batch.features, &batch.labels, &device);
            let loss = loss_fn.forward(ddp.module().forward(x), y);
            loss_sum += loss.clone().into_scalar::<f32>();
            let grads = ddp.sync_gradients(loss.backward())?;
            ddp.map_module(|m| optim.step(1e-3, m, grads));
            at.global_step += 1;
        }
        // Uneven shards would need `ddp.join(...)` here; DistributedSampler pads every rank's
        // share to the same length, so each rank took the same number of steps.
        let accuracy = evaluate(ddp.module(), &test, &device, &pg)?;
        if rank == 0 {
            println!(
                "epoch {}: loss {:.4}, test accuracy {:.2}%",
                epoch + 1,
                loss_sum / loader.num_batches() as f32,
                100.0 * accuracy
            );
        }
        // A crash-safe checkpoint (temporary file, fsync, rename), from one rank: the
        // replicas are equal. Saved at the epoch's end, so the next run starts epoch + 1;
        // a loop that saves mid-epoch records `step_in_epoch` and `samples_in_epoch` too, and
        // `phalanx_checkpoint::position::epoch_indices` gives each rank the rest of that epoch.
        at.epoch = epoch + 1;
        if rank == 0 {
            state_dict::save(&flags.checkpoint_dir, ddp.module(), &optim, at)?;
        }
    }

    // 7. The replicas are bitwise identical, buffers included: checked here across ranks.
    let digest = digest(&params_to_flat(ddp.module())?) as i64;
    let mut digests = vec![0i64; world];
    pg.allgather(&[digest], &mut digests)?;
    if digests.iter().any(|&d| d != digests[0]) {
        return Err(format!("replicas differ: {digests:x?}").into());
    }
    if rank == 0 {
        println!("{world} replica(s) identical (parameters and BatchNorm statistics)");
    }
    Ok(())
}

fn tensors(features: &[f32], labels: &[i64], device: &Device) -> (Tensor<4>, Tensor<1, Int>) {
    let n = labels.len();
    let x = Tensor::from_data(TensorData::new(features.to_vec(), [n, 1, 28, 28]), device);
    let y = Tensor::from_data(TensorData::new(labels.to_vec(), [n]), device);
    (x, y)
}

/// Test accuracy over the whole test set: each rank counts its exact shard, the counts are
/// summed over ranks.
fn evaluate(
    model: &Net,
    test: &phalanx_data::Dataset,
    device: &Device,
    pg: &phalanx_pg::ProcessGroup,
) -> Result<f64, Box<dyn std::error::Error>> {
    let model = model.valid(); // inference: BatchNorm uses its running statistics
    let shard = phalanx_data::exact_shard(test.len(), pg.world_size(), pg.rank())?;
    let (x, y) = tensors(
        &test.features()[shard.start * 784..shard.end * 784],
        &test.labels()[shard.clone()],
        &device.clone().without_autodiff(),
    );
    let predicted = model.forward(x).argmax(1).reshape([shard.len()]);
    let correct = predicted.equal(y).int().sum().into_scalar::<i64>();
    let mut counts = [correct, shard.len() as i64];
    pg.allreduce(&mut counts, ReduceOp::Sum)?;
    Ok(counts[0] as f64 / counts[1].max(1) as f64)
}

/// FNV-1a over the values' bits: equal digests, bitwise equal replicas (with overwhelming odds).
fn digest(values: &[Vec<f32>]) -> u64 {
    values.iter().flatten().fold(0xcbf2_9ce4_8422_2325, |h, v| {
        (h ^ u64::from(v.to_bits())).wrapping_mul(0x0100_0000_01b3)
    })
}
