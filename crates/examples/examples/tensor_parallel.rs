//! Your own Burn model split across ranks by tensor parallelism (Megatron's layout, what
//! PyTorch's `parallelize_module` does with `ColwiseParallel` and `RowwiseParallel`), and data
//! parallel over the rest of the world: a mesh `("dp", world / 2) × ("tp", 2)`. The two ranks
//! of a tensor-parallel group hold half of the MLP's matrices each and train on the same batch;
//! DDP averages the pieces' gradients over the data-parallel group. `docs/train.md` has
//! `phalanx train --model gpt --tp 2`, which does this for a GPT.
//!
//! ```sh
//! cargo build --release -p phalanx-examples --example tensor_parallel
//! phalanx launch --standalone --nproc-per-node 4 -- target/release/examples/tensor_parallel
//! ```

use std::sync::Arc;

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::AdamConfig;
use burn::tensor::activation::{gelu, relu};
use burn::tensor::{Device, Tensor};
use phalanx_ddp::adapter::burn::{param_infos, params_to_flat};
use phalanx_ddp::{DdpOptions, DistributedDataParallel};
use phalanx_examples::teacher_batch;
use phalanx_pg::{Mesh, ProcessGroup};
use phalanx_tensor_parallel::{gather_whole, ColwiseParallel, Placement, RowwiseParallel};

/// An MLP pair and a head: `fc` split by output columns, `proj` by input rows (one all-reduce
/// per direction for the pair), the head whole on every rank.
#[derive(Module, Debug)]
struct Net {
    fc: Linear,
    proj: Linear,
    head: Linear,
}

/// Where each float tensor's pieces are, in canonical order: `fc.weight` (Burn's `[in, out]`:
/// columns are axis 1), `fc.bias`, `proj.weight` (rows: axis 0), `proj.bias`, `head.weight`,
/// `head.bias`. The replicated ones are the same on every rank of the group.
const PLACEMENTS: [Placement; 6] = [
    Placement::Shard(1),
    Placement::Shard(0),
    Placement::Shard(0),
    Placement::Replicate,
    Placement::Replicate,
    Placement::Replicate,
];

impl Net {
    /// The whole model, the same on every rank (the same seed).
    fn whole(device: &Device) -> Net {
        device.seed(0);
        Net {
            fc: LinearConfig::new(32, 256).init(device),
            proj: LinearConfig::new(256, 32).init(device),
            head: LinearConfig::new(32, 4).init(device),
        }
    }

    /// Rank `rank` of `size`'s piece.
    fn split(self, rank: usize, size: usize) -> phalanx_tensor_parallel::Result<Net> {
        Ok(Net {
            fc: ColwiseParallel::shard(self.fc, rank, size)?,
            proj: RowwiseParallel::shard(self.proj, rank, size)?,
            head: self.head,
        })
    }

    fn forward(&self, x: Tensor<2>, tp: &Arc<ProcessGroup>) -> Tensor<2> {
        // This rank's 256 / tp columns of the hidden layer: no communication...
        let h = gelu(ColwiseParallel::forward(&self.fc, x, tp));
        // ...then its rows of `proj`, summed over the group: whole again on every rank.
        let x = RowwiseParallel::forward(&self.proj, h, tp);
        self.head.forward(relu(x))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pg = Arc::new(phalanx_pg::init_process_group()?); // RANK, WORLD_SIZE… from any launcher
    pg.abort_on_panic();
    let world = pg.world_size();
    let size = if world.is_multiple_of(2) { 2 } else { 1 };
    // The tensor-parallel ranks are consecutive: on one host, under shared memory.
    let mesh = Mesh::new(&pg, &[("dp", world / size), ("tp", size)])?;
    let (dp, tp) = (mesh.group("dp").unwrap(), mesh.group("tp").unwrap());
    let device = Device::flex().autodiff();
    let net = Net::whole(&device).split(tp.rank(), size)?;
    // DDP on the data-parallel group: its peers hold the same piece.
    let mut ddp = DistributedDataParallel::new(net, dp.clone(), DdpOptions::default())?;
    let mut optim = AdamConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    for step in 0..200 {
        let (x, y) = teacher_batch(step, dp.rank(), &device);
        let loss = loss_fn.forward(ddp.module().forward(x, tp), y);
        let value = loss.clone().into_scalar::<f32>();
        let grads = ddp.sync_gradients(loss.backward())?;
        ddp.map_module(|m| optim.step(1e-3, m, grads));
        if pg.rank() == 0 && step % 50 == 0 {
            println!("step {step}: loss {value:.4}");
        }
    }
    // The whole model from the pieces: an all-gather over the group for each split tensor.
    let infos = param_infos(ddp.module());
    let pieces = params_to_flat(ddp.module())?;
    let mut held = 0;
    let mut whole = Vec::new();
    for ((piece, info), placement) in pieces.iter().zip(&infos).zip(PLACEMENTS) {
        held += piece.len();
        whole.push(gather_whole(piece, &info.shape, placement, tp)?);
    }
    let total: usize = whole.iter().map(Vec::len).sum();
    let digest: f64 = whole.iter().flatten().map(|&v| f64::from(v)).sum();
    println!(
        "rank {} (tp rank {} of {size}): held {held} of {total} parameter elements; \
         parameters sum {digest:.6}",
        pg.rank(),
        tp.rank()
    );
    Ok(())
}
