//! What the two MNIST Learner programs share (`mnist_burn.rs`, `mnist_learner.rs`): the
//! model, the data, the command line, and evaluating a saved model (the replicas' digest is in
//! `common/mod.rs`, shared with `tasks_learner.rs`). Laid out as Burn's book lays out its MNIST guide (a model
//! file, a data file, a training function): the training itself is in each program.

use std::path::PathBuf;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::{Dataset as _, InMemDataset};
use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{
    BatchNorm, BatchNormConfig, Dropout, DropoutConfig, Linear, LinearConfig, PaddingConfig2d, Relu,
};
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep};

use crate::common::Error;

// The model.
#[derive(Module, Debug)]
pub(crate) struct Model {
    conv1: Conv2d,
    norm1: BatchNorm,
    pool: MaxPool2d,
    conv2: Conv2d,
    norm2: Option<BatchNorm>,
    dropout: Dropout,
    linear1: Linear,
    linear2: Linear,
    activation: Relu,
}

impl Model {
    /// `--model small` (the default, seconds to train):
    /// Conv(1,8,3) BatchNorm ReLU MaxPool2 → Conv(8,16,3) ReLU MaxPool2 → Dropout →
    /// Linear(400,64) ReLU → Linear(64,10). `--model cnn`, `phalanx train --model cnn`'s layers
    /// (crates/train/src/model/cnn.rs; the benchmark's like-for-like): Conv(1,16,3,pad 1)
    /// BatchNorm ReLU MaxPool2 → Conv(16,32,3,pad 1) BatchNorm ReLU MaxPool2 → Dropout →
    /// Linear(1568,64) ReLU → Linear(64,10).
    pub(crate) fn new(device: &Device, args: &Args) -> Self {
        let cnn = args.model == "cnn";
        let (c1, c2, pad) = if cnn { (16, 32, 1) } else { (8, 16, 0) };
        let side = if cnn { 7 } else { 5 }; // 28 -> 14 -> 7, or 28 -> 26 -> 13 -> 11 -> 5
        let conv = |i, o| {
            Conv2dConfig::new([i, o], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
                .init(device)
        };
        Self {
            conv1: conv(1, c1),
            norm1: BatchNormConfig::new(c1).init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            conv2: conv(c1, c2),
            norm2: cnn.then(|| BatchNormConfig::new(c2).init(device)),
            dropout: DropoutConfig::new(args.dropout).init(),
            linear1: LinearConfig::new(c2 * side * side, 64).init(device),
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
        let x = self.conv2.forward(x);
        let x = match &self.norm2 {
            Some(norm) => norm.forward(x),
            None => x,
        };
        let x = self.pool.forward(self.activation.forward(x));
        let x = self.dropout.forward(x.flatten(1, 3));
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
pub(crate) struct MnistItem {
    pixels: Vec<f32>, // 28 * 28, in [0, 1]
    label: i64,
}

#[derive(Clone, Default)]
pub(crate) struct MnistBatcher;

#[derive(Clone, Debug)]
pub(crate) struct MnistBatch {
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

/// The MNIST sample shipped in `data/`: 4,000 images to train on, 1,000 to validate.
pub(crate) fn datasets() -> Result<(InMemDataset<MnistItem>, InMemDataset<MnistItem>), Error> {
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

/// The command line (`--help`-free: the flags are listed in the error for an unknown one).
pub(crate) struct Args {
    pub(crate) epochs: usize,
    pub(crate) artifact_dir: PathBuf,
    pub(crate) grads_accumulation: Option<usize>,
    /// The global batch: every optimizer step averages over this many images, whatever the
    /// number of processes (docs/learner.md, "The batch size").
    batch_size: usize,
    pub(crate) dropout: f64,
    /// `small` or `cnn` ([`Model::new`]).
    model: String,
    resume: bool,
    evaluate: bool,
}

const USAGE: &str = "expected --epochs N (default 2), --artifact-dir DIR (default mnist_learner \
in the temporary directory), --batch-size GLOBAL (default 64), --grads-accumulation K, \
--dropout P (default 0.2), --model small|cnn, --resume auto, --evaluate";

impl Args {
    /// The flags; with `--evaluate`, evaluates the newest checkpoint and exits.
    pub(crate) fn parse() -> Result<Args, Error> {
        let mut a = Args {
            epochs: 2,
            artifact_dir: std::env::temp_dir().join("mnist_learner"),
            grads_accumulation: None,
            batch_size: 64,
            dropout: 0.2,
            model: "small".into(),
            resume: false,
            evaluate: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or(format!("{flag} needs a value"));
            match flag.as_str() {
                "--epochs" => a.epochs = value()?.parse()?,
                "--artifact-dir" => a.artifact_dir = PathBuf::from(value()?),
                "--batch-size" => a.batch_size = value()?.parse()?,
                "--grads-accumulation" => a.grads_accumulation = Some(value()?.parse()?),
                "--dropout" => a.dropout = value()?.parse()?,
                "--model" => match value()?.as_str() {
                    m @ ("small" | "cnn") => a.model = m.into(),
                    other => return Err(format!("--model {other:?}: expected small or cnn").into()),
                },
                "--resume" => match value()?.as_str() {
                    "auto" => a.resume = true,
                    other => return Err(format!("--resume {other:?}: expected auto").into()),
                },
                "--evaluate" => a.evaluate = true,
                _ => return Err(format!("unknown flag {flag:?}: {USAGE}").into()),
            }
        }
        if a.evaluate {
            evaluate(&a)?;
            std::process::exit(0);
        }
        Ok(a)
    }

    /// This process's share of the global batch.
    pub(crate) fn batch_size_per_rank(&self) -> Result<usize, Error> {
        crate::common::batch_size_per_rank(self.batch_size)
    }

    /// With `--resume auto`, the newest complete checkpoint in the artifact directory (a run
    /// restarted by its launcher continues from it); `None` trains from the start.
    pub(crate) fn resume_from(&self) -> Option<usize> {
        let epoch = phalanx_learner::newest_checkpoint(&self.artifact_dir.join("checkpoint"))
            .filter(|_| self.resume)?;
        let restart = std::env::var("TORCHELASTIC_RESTART_COUNT").unwrap_or_else(|_| "0".into());
        println!("resuming after epoch {epoch} (restart {restart})");
        Some(epoch)
    }
}

/// `--evaluate`: the newest checkpoint's model over the whole validation set, in this one
/// process, printed as the training prints its validation line.
fn evaluate(args: &Args) -> Result<(), Error> {
    let dir = args.artifact_dir.join("checkpoint");
    let epoch = phalanx_learner::newest_checkpoint(&dir)
        .ok_or(format!("no checkpoint in {}", dir.display()))?;
    let device = Device::flex();
    let model = Model::new(&device, args).try_load_file(dir.join(format!("model-{epoch}.bpk")))?;
    let (_, valid) = datasets()?;
    let items = (0..valid.len())
        .map(|i| valid.get(i))
        .collect::<Result<Vec<MnistItem>, _>>()?;
    let n = items.len();
    let batch = MnistBatcher.batch(items, &device);
    let predicted = model.forward(batch.images).argmax(1).reshape([n]);
    let correct = predicted
        .equal(batch.targets)
        .int()
        .sum()
        .into_data()
        .iter::<i64>()
        .sum::<i64>();
    println!(
        "evaluate epoch {epoch}: Accuracy {:.4} ({correct} of {n})",
        100.0 * correct as f64 / n as f64
    );
    Ok(())
}
