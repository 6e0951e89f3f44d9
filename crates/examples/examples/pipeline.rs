//! Your own Burn model cut into pipeline stages (what PyTorch's `torch.distributed.pipelining`
//! does with a `PipelineStage` and a schedule), in a loop of your own, and data parallel over
//! the rest of the world: a mesh `("pp", 2) × ("dp", world / 2)`. The model implements the
//! pipeline hooks of phalanx-train's `Classifier` (what a stage holds, and its forward); a
//! `PipelineStage` keeps this rank's blocks and runs each batch's microbatches through the
//! 1F1B schedule with the other stage, the activations and their gradients going between the
//! ranks. DDP averages each stage's gradients over its data-parallel group. On one process the
//! whole model trains on the same batches, and ends where the pipeline does (to float rounding:
//! the microbatches' gradients are summed in another order). `docs/train.md` has `phalanx train
//! --model gpt --pp 2`, which does this for a GPT.
//!
//! ```sh
//! cargo build --release -p phalanx-examples --example pipeline
//! phalanx launch --standalone --nproc-per-node 2 -- target/release/examples/pipeline
//! target/release/examples/pipeline     # one process, the whole model: the same sum
//! ```

use std::ops::Range;
use std::sync::Arc;

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::AdamConfig;
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use phalanx_ddp::adapter::burn::params_to_flat;
use phalanx_ddp::{DdpOptions, DistributedDataParallel};
use phalanx_examples::teacher_rows;
use phalanx_pg::Mesh;
use phalanx_train::{
    Classifier, PipelineCosts, PipelineOptions, PipelineSchedule, PipelineStage, StageOutput,
};

const FEATURES: usize = 32;
const WIDTH: usize = 64;
const CLASSES: usize = 4;
const BLOCKS: usize = 4;

/// A residual MLP: an input layer, `BLOCKS` blocks `x + relu(W x)`, a head. Under a pipeline a
/// rank holds some blocks, the input layer on the first stage, the head on the last.
#[derive(Module, Debug)]
struct Net {
    input: Option<Linear>,
    blocks: Vec<Linear>,
    head: Option<Linear>,
    /// This rank's chunks, as ranges of `blocks` (empty: the whole model).
    #[module(skip)]
    chunks: Vec<Range<usize>>,
    #[module(skip)]
    device: Device,
}

impl Net {
    /// The whole model, the same on every rank (the same seed).
    fn whole(device: &Device) -> Net {
        device.seed(0);
        Net {
            input: Some(LinearConfig::new(FEATURES, WIDTH).init(device)),
            blocks: (0..BLOCKS)
                .map(|_| LinearConfig::new(WIDTH, WIDTH).init(device))
                .collect(),
            head: Some(LinearConfig::new(WIDTH, CLASSES).init(device)),
            chunks: Vec::new(),
            device: device.clone(),
        }
    }

    /// `x` `[batch, 1, WIDTH]` through `blocks[range]`.
    fn run(&self, range: Range<usize>, x: Tensor<3>) -> Tensor<3> {
        self.blocks[range]
            .iter()
            .fold(x, |x, block| x.clone() + relu(block.forward(x)))
    }

    /// The input layer on rows `[batch, FEATURES]`: the stream `[batch, 1, WIDTH]` (a stage
    /// sends one `[seq, width]` row per sample; here `seq` is 1).
    fn enter(&self, rows: Tensor<2>) -> Tensor<3> {
        let [batch, _] = rows.dims();
        let input = self
            .input
            .as_ref()
            .expect("the first stage holds the input layer");
        input.forward(rows).reshape([batch, 1, WIDTH])
    }

    fn leave(&self, x: Tensor<3>) -> Tensor<2> {
        let [batch, _, _] = x.dims();
        let head = self.head.as_ref().expect("the last stage holds the head");
        head.forward(x.reshape([batch, WIDTH]))
    }
}

impl Classifier for Net {
    fn input_dim(&self) -> usize {
        FEATURES
    }

    /// The whole model's forward (one process).
    fn logits(&self, input: Tensor<2>) -> Tensor<2> {
        self.leave(self.run(0..self.blocks.len(), self.enter(input)))
    }

    fn device(&self) -> Device {
        self.device.clone()
    }

    /// What a cut weighs: the stages are balanced by parameters.
    fn pipeline_costs(&self) -> Option<PipelineCosts> {
        Some(PipelineCosts {
            first: self.input.num_params(),
            blocks: self.blocks.iter().map(Module::num_params).collect(),
            last: self.head.num_params(),
        })
    }

    /// Keeps the blocks of `chunks`, the input layer if `first`, the head if `last`.
    fn pipeline_stage(
        self,
        chunks: &[Range<usize>],
        first: bool,
        last: bool,
    ) -> Result<Self, String> {
        let mut whole: Vec<Option<Linear>> = self.blocks.into_iter().map(Some).collect();
        let (mut blocks, mut local) = (Vec::new(), Vec::new());
        for range in chunks {
            let start = blocks.len();
            for i in range.clone() {
                blocks.push(
                    whole[i]
                        .take()
                        .ok_or_else(|| format!("block {i} asked for twice"))?,
                );
            }
            local.push(start..blocks.len());
        }
        Ok(Net {
            input: self.input.filter(|_| first),
            blocks,
            head: self.head.filter(|_| last),
            chunks: local,
            device: self.device,
        })
    }

    /// Chunk `chunk`'s forward: from the rows on the first stage, from what the stage before
    /// sent on the others; the logits on the last.
    fn stage_forward(
        &self,
        chunk: usize,
        input: Tensor<2>,
        received: Option<Tensor<3>>,
    ) -> phalanx_train::Result<StageOutput> {
        let x = received.unwrap_or_else(|| self.enter(input));
        let x = self.run(self.chunks[chunk].clone(), x);
        Ok(
            match self.head.is_some() && chunk + 1 == self.chunks.len() {
                true => StageOutput::Logits(self.leave(x)),
                false => StageOutput::Hidden(x),
            },
        )
    }

    /// Each chunk's float tensors (a `Linear`'s weight and bias), with the input layer's on the
    /// first chunk and the head's on the last: canonical order is the stages' in turn.
    fn chunk_tensors(&self) -> Vec<usize> {
        let n = self.chunks.len();
        (0..n)
            .map(|c| {
                let mut tensors = 2 * self.chunks[c].len();
                if c == 0 && self.input.is_some() {
                    tensors += 2;
                }
                if c + 1 == n && self.head.is_some() {
                    tensors += 2;
                }
                tensors
            })
            .collect()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pg = Arc::new(phalanx_pg::init_process_group()?); // RANK, WORLD_SIZE… from any launcher
    pg.abort_on_panic();
    let world = pg.world_size();
    let stages = if world.is_multiple_of(2) { 2 } else { 1 };
    // Stages farthest apart (they exchange the least), as torchtitan lays them out.
    let mesh = Mesh::new(&pg, &[("pp", stages), ("dp", world / stages)])?;
    let (pp, dp) = (mesh.group("pp").unwrap(), mesh.group("dp").unwrap());
    let device = Device::flex().autodiff();
    let net = Net::whole(&device);
    let (stage, net) = match stages > 1 {
        true => {
            let options = PipelineOptions {
                stages,
                microbatches: 4,
                schedule: PipelineSchedule::OneFOneB,
                ..PipelineOptions::default()
            };
            let (stage, net) = PipelineStage::cut(pp.clone(), &options, [1, WIDTH], net)?;
            (Some(stage), net)
        }
        false => (None, net),
    };
    // DDP on the data-parallel group: its peers hold the same stage.
    let mut ddp = DistributedDataParallel::new(net, dp.clone(), DdpOptions::default())?;
    let mut optim = AdamConfig::new().init();
    for step in 0..100 {
        let (x, y) = teacher_rows(step, dp.rank());
        let (grads, loss) = match &stage {
            Some(stage) => stage.forward_backward(ddp.module(), &x, &y, step as u64)?,
            None => phalanx_train::forward_backward(ddp.module(), &x, &y)?,
        };
        let grads = ddp.sync_gradients(grads)?;
        ddp.map_module(|m| optim.step(1e-3, m, grads));
        if pg.rank() == 0 && step % 25 == 0 {
            println!("step {step}: loss {loss:.4}");
        }
    }
    // The whole model from the stages: each stage's tensors, in the stages' order.
    let mine = params_to_flat(ddp.module())?;
    let held = mine.len();
    let whole = match &stage {
        Some(stage) => stage.whole(mine, &ddp.module().chunk_tensors())?,
        None => mine,
    };
    let digest: f64 = whole.iter().flatten().map(|&v| f64::from(v)).sum();
    let bubble = match stage.as_ref().map(PipelineStage::bubble).transpose()? {
        Some(Some(b)) => format!("; bubble {:.2} (1F1B's theory {:.2})", b.measured, b.theory),
        _ => String::new(),
    };
    println!(
        "rank {} (stage {} of {stages}): held {held} of {} tensors; parameters sum \
         {digest:.6}{bubble}",
        pg.rank(),
        pp.rank(),
        whole.len()
    );
    Ok(())
}
