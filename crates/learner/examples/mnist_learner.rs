//! A burn-train Learner program, distributed by changing one line.
//!
//! Written the way Burn's book writes one: a model (Conv2d, BatchNorm, Dropout, Linear), a
//! `Batcher`, `SupervisedTraining` with loss and accuracy metrics and a checkpointer. The only
//! phalanx line is the training strategy, marked below. On the MNIST sample shipped in `data/`
//! (4,000 images to train on, 1,000 to validate), in seconds:
//!
//! ```sh
//! cargo run --release -p phalanx-learner --example mnist_learner           # one process
//! cargo build --release -p phalanx-learner --example mnist_learner
//! phalanx launch --nproc-per-node 2 -- target/release/examples/mnist_learner # two
//! ```
//!
//! Flags: `--epochs N` (default 2), `--artifact-dir DIR` (default `mnist_learner` in the
//! system's temporary directory: metric logs and checkpoints), `--grads-accumulation K`.
//! At the end every rank prints a digest of its trained parameters and BatchNorm statistics:
//! equal digests, bitwise-equal replicas.

use std::path::PathBuf;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataset::InMemDataset;
use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Dropout, DropoutConfig, Linear, LinearConfig, Relu};
use burn::optim::AdamConfig;
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_train::metric::{AccuracyMetric, LossMetric};
use burn_train::{
    ClassificationOutput, InferenceStep, Learner, SupervisedTraining, TrainOutput, TrainStep,
};

// The model.
#[derive(Module, Debug)]
struct Model {
    conv1: Conv2d,
    norm1: BatchNorm,
    pool: MaxPool2d,
    conv2: Conv2d,
    dropout: Dropout,
    linear1: Linear,
    linear2: Linear,
    activation: Relu,
}

impl Model {
    fn new(device: &Device) -> Self {
        Self {
            conv1: Conv2dConfig::new([1, 8], [3, 3]).init(device), // 28x28 -> 26x26
            norm1: BatchNormConfig::new(8).init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(), // -> 13x13, 5x5
            conv2: Conv2dConfig::new([8, 16], [3, 3]).init(device),         // 13x13 -> 11x11
            dropout: DropoutConfig::new(0.2).init(),
            linear1: LinearConfig::new(16 * 5 * 5, 64).init(device),
            linear2: LinearConfig::new(64, 10).init(device),
            activation: Relu::new(),
        }
    }

    /// Images `[batch, 28, 28]` to logits `[batch, 10]`.
    fn forward(&self, images: Tensor<3>) -> Tensor<2> {
        let [batch, height, width] = images.dims();
        let x = images.reshape([batch, 1, height, width]);
        let x = self
            .activation
            .forward(self.norm1.forward(self.conv1.forward(x)));
        let x = self.pool.forward(x);
        let x = self
            .pool
            .forward(self.activation.forward(self.conv2.forward(x)));
        let x = self.dropout.forward(x.reshape([batch, 16 * 5 * 5]));
        let x = self.activation.forward(self.linear1.forward(x));
        self.linear2.forward(x)
    }

    fn forward_classification(&self, batch: MnistBatch) -> ClassificationOutput {
        let output = self.forward(batch.images);
        let loss = CrossEntropyLossConfig::new()
            .init(&output.device())
            .forward(output.clone(), batch.targets.clone());
        ClassificationOutput::new(loss, output, batch.targets)
    }
}

impl TrainStep for Model {
    type Input = MnistBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: MnistBatch) -> TrainOutput<ClassificationOutput> {
        let item = self.forward_classification(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl InferenceStep for Model {
    type Input = MnistBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: MnistBatch) -> ClassificationOutput {
        self.forward_classification(batch)
    }
}

// The data: one image and its label, and the batcher that stacks them.
#[derive(Clone, Debug)]
struct MnistItem {
    pixels: Vec<f32>, // 28 * 28, in [0, 1]
    label: i64,
}

#[derive(Clone, Default)]
struct MnistBatcher;

#[derive(Clone, Debug)]
struct MnistBatch {
    images: Tensor<3>,
    targets: Tensor<1, Int>,
}

impl Batcher<MnistItem, MnistBatch> for MnistBatcher {
    fn batch(&self, items: Vec<MnistItem>, device: &Device) -> MnistBatch {
        let n = items.len();
        // Normalised with MNIST's mean and standard deviation, as the book does.
        let pixels: Vec<f32> = items
            .iter()
            .flat_map(|item| item.pixels.iter().map(|p| (p - 0.1307) / 0.3081))
            .collect();
        let labels: Vec<i64> = items.iter().map(|item| item.label).collect();
        MnistBatch {
            images: Tensor::from_data(TensorData::new(pixels, [n, 28, 28]), device),
            targets: Tensor::from_data(TensorData::new(labels, [n]), device),
        }
    }
}

fn datasets(
) -> Result<(InMemDataset<MnistItem>, InMemDataset<MnistItem>), Box<dyn std::error::Error>> {
    let (train, valid) = phalanx_data::mnist5k()?.split(0.2, 0)?;
    let items = |d: &phalanx_data::Dataset| -> Vec<MnistItem> {
        d.features()
            .chunks(784)
            .zip(d.labels())
            .map(|(pixels, &label)| MnistItem {
                pixels: pixels.to_vec(),
                label,
            })
            .collect()
    };
    Ok((
        InMemDataset::new(items(&train)),
        InMemDataset::new(items(&valid)),
    ))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut epochs = 2;
    let mut artifact_dir = std::env::temp_dir().join("mnist_learner");
    let mut accumulation = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--epochs" => epochs = value()?.parse()?,
            "--artifact-dir" => artifact_dir = PathBuf::from(value()?),
            "--grads-accumulation" => accumulation = Some(value()?.parse()?),
            _ => return Err(format!("unknown flag {flag:?}: expected --epochs N, --artifact-dir DIR, --grads-accumulation K").into()),
        }
    }

    let device = Device::flex().autodiff();
    device.seed(42);
    let (train, valid) = datasets()?;
    let loader_train = DataLoaderBuilder::new(MnistBatcher)
        .batch_size(64)
        .shuffle(42)
        .build(train);
    let loader_valid = DataLoaderBuilder::new(MnistBatcher)
        .batch_size(256)
        .build(valid);

    let training = SupervisedTraining::new(&artifact_dir, loader_train, loader_valid)
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .with_default_checkpointers()
        .num_epochs(epochs)
        .summary()
        // The one phalanx line: every process of a `phalanx launch` (torchrun, mpirun, srun)
        // job trains its share; without a launcher, this is Burn's single-device training.
        .with_training_strategy(phalanx_learner::Distributed::new(device.clone())?.into());
    let training = match accumulation {
        Some(k) => training.grads_accumulation(k),
        None => training,
    };
    let learner = Learner::new(Model::new(&device), AdamConfig::new().init(), 1e-3);
    let result = training.launch(learner);
    if let Some(error) = result.error {
        return Err(format!("training failed: {error}").into());
    }

    // Not part of a Learner program: the check that every rank ends with the same model.
    let rank = std::env::var("RANK").unwrap_or_else(|_| "0".into());
    println!(
        "rank {rank}: parameter digest {:016x}",
        digest(&result.model)
    );
    Ok(())
}

/// FNV-1a over every float of the model (parameters and BatchNorm statistics), in visiting order.
fn digest(model: &Model) -> u64 {
    struct Fnv(u64);
    impl ModuleVisitor for Fnv {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let values = param
                .val()
                .into_data()
                .try_to_vec::<f32>()
                .expect("f32 parameters");
            for v in values {
                self.0 = (self.0 ^ u64::from(v.to_bits())).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    let mut fnv = Fnv(0xcbf2_9ce4_8422_2325);
    model.visit(&mut fnv);
    fnv.0
}
