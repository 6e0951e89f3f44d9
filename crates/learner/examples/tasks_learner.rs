//! Two more burn-train Learner programs through the same strategy, beyond classification: a
//! regression (an MLP fitting a function, burn-train's `RegressionOutput`, MSE loss) and a
//! sequence model (a transformer encoder tagging every token, burn-train's `SequenceOutput`,
//! loss and token accuracy). As in `mnist_learner.rs`, the only phalanx line is the strategy.
//!
//! The data are synthetic, drawn with Burn's `Tensor::random` from a fixed seed, so every rank
//! (and every run) builds the same: 512 samples to train on and 128 to validate.
//!
//! * `--task regression`: `y = sin(3 x0) + x1^2` for `x` uniform in `[-1, 1]^2`;
//!   Linear(2, 32) ReLU Linear(32, 32) ReLU Linear(32, 1).
//! * `--task sequence`: 8 tokens of a vocabulary of 8, the target is the sequence reversed
//!   (every position must attend to another one, which needs positional information);
//!   token embedding + learned position embedding → TransformerEncoder (d_model 32, 2 heads,
//!   1 layer) → Linear(32, 8) per position.
//!
//! ```sh
//! cargo run --release -p phalanx-learner --example tasks_learner -- --task sequence  # one process
//! cargo build --release -p phalanx-learner --example tasks_learner
//! phalanx launch --nproc-per-node 2 -- target/release/examples/tasks_learner --task regression
//! ```
//!
//! Flags: `--task regression|sequence` (required), `--epochs N` (default 3), `--artifact-dir
//! DIR` (default `tasks_learner-TASK` in the system's temporary directory), `--batch-size B`
//! (the global batch, default 32: each of W processes loads B / W). Rank 0 prints one line of
//! validation metrics per epoch; at the end every rank prints a digest of its parameters.

use std::path::PathBuf;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::loss::{CrossEntropyLossConfig, MseLoss, Reduction};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig, Relu};
use burn::optim::AdamConfig;
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use burn_train::metric::{AccuracyMetric, LossMetric};
use burn_train::{
    InferenceStep, Learner, LearnerModel, RegressionOutput, SequenceOutput, SupervisedTraining,
    TrainOutput, TrainStep,
};

mod common;
use common::Error;

/// Samples to train on and to validate on, for both tasks.
const TRAIN: usize = 512;
const VALID: usize = 128;

// The regression model: an MLP from 2 inputs to 1 output.
#[derive(Module, Debug)]
struct Mlp {
    linear1: Linear,
    linear2: Linear,
    linear3: Linear,
    activation: Relu,
}

impl Mlp {
    fn new(device: &Device) -> Self {
        Self {
            linear1: LinearConfig::new(2, 32).init(device),
            linear2: LinearConfig::new(32, 32).init(device),
            linear3: LinearConfig::new(32, 1).init(device),
            activation: Relu::new(),
        }
    }

    fn forward_regression(&self, batch: PointBatch) -> RegressionOutput {
        let x = self.activation.forward(self.linear1.forward(batch.inputs));
        let x = self.activation.forward(self.linear2.forward(x));
        let output = self.linear3.forward(x);
        let loss = MseLoss::new().forward(output.clone(), batch.targets.clone(), Reduction::Mean);
        RegressionOutput::new(loss, output, batch.targets)
    }
}

impl TrainStep for Mlp {
    type Input = PointBatch;
    type Output = RegressionOutput;

    fn step(&self, batch: PointBatch) -> TrainOutput<RegressionOutput> {
        let item = self.forward_regression(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl InferenceStep for Mlp {
    type Input = PointBatch;
    type Output = RegressionOutput;

    fn step(&self, batch: PointBatch) -> RegressionOutput {
        self.forward_regression(batch)
    }
}

// The regression data: a point and the function's value there.
#[derive(Clone, Debug)]
struct Point {
    x: [f32; 2],
    y: f32,
}

#[derive(Clone, Debug)]
struct PointBatch {
    inputs: Tensor<2>,
    targets: Tensor<2>,
}

#[derive(Clone, Default)]
struct PointBatcher;

impl Batcher<Point, PointBatch> for PointBatcher {
    fn batch(&self, items: Vec<Point>, device: &Device) -> PointBatch {
        let n = items.len();
        let x: Vec<f32> = items.iter().flat_map(|p| p.x).collect();
        let y: Vec<f32> = items.iter().map(|p| p.y).collect();
        PointBatch {
            inputs: Tensor::from_data(TensorData::new(x, [n, 2]), device),
            targets: Tensor::from_data(TensorData::new(y, [n, 1]), device),
        }
    }
}

/// `count` points of `y = sin(3 x0) + x1^2`, `x` uniform in `[-1, 1]^2`, drawn from `data`'s
/// generator.
fn points(data: &Device, count: usize) -> Vec<Point> {
    uniform(data, count * 2, -1.0, 1.0)
        .chunks(2)
        .map(|x| Point {
            x: [x[0], x[1]],
            y: (3.0 * x[0]).sin() + x[1] * x[1],
        })
        .collect()
}

/// `count` values uniform in `[low, high)` from `data`'s generator (Burn's `Tensor::random`).
fn uniform(data: &Device, count: usize, low: f64, high: f64) -> Vec<f32> {
    Tensor::<1>::random([count], Distribution::Uniform(low, high), data)
        .into_data()
        .iter::<f32>()
        .collect()
}

// The sequence model: a transformer encoder that tags every token.
const VOCABULARY: usize = 8;
const LENGTH: usize = 8;

#[derive(Module, Debug)]
struct Tagger {
    token: Embedding,
    position: Embedding,
    encoder: TransformerEncoder,
    head: Linear,
}

impl Tagger {
    fn new(device: &Device) -> Self {
        let d_model = 32;
        Self {
            token: EmbeddingConfig::new(VOCABULARY, d_model).init(device),
            position: EmbeddingConfig::new(LENGTH, d_model).init(device),
            encoder: TransformerEncoderConfig::new(d_model, 64, 2, 1)
                .with_dropout(0.0)
                .with_norm_first(true)
                .init(device),
            head: LinearConfig::new(d_model, VOCABULARY).init(device),
        }
    }

    fn forward_sequence(&self, batch: TokenBatch) -> SequenceOutput {
        let [size, length] = batch.tokens.dims();
        let device = batch.tokens.device();
        let positions = Tensor::<1, Int>::arange(0..length as i64, &device)
            .reshape([1, length])
            .repeat_dim(0, size);
        let x = self.token.forward(batch.tokens) + self.position.forward(positions);
        let x = self.encoder.forward(TransformerEncoderInput::new(x));
        let logits = self.head.forward(x);
        let loss = CrossEntropyLossConfig::new().init(&device).forward(
            logits.clone().reshape([size * length, VOCABULARY]),
            batch.targets.clone().reshape([size * length]),
        );
        SequenceOutput::new(loss, logits, None, batch.targets)
    }
}

impl TrainStep for Tagger {
    type Input = TokenBatch;
    type Output = SequenceOutput;

    fn step(&self, batch: TokenBatch) -> TrainOutput<SequenceOutput> {
        let item = self.forward_sequence(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl InferenceStep for Tagger {
    type Input = TokenBatch;
    type Output = SequenceOutput;

    fn step(&self, batch: TokenBatch) -> SequenceOutput {
        self.forward_sequence(batch)
    }
}

// The sequence data: a sequence of tokens and its tags (here, the sequence reversed).
#[derive(Clone, Debug)]
struct Tokens {
    tokens: [i64; LENGTH],
    tags: [i64; LENGTH],
}

#[derive(Clone, Debug)]
struct TokenBatch {
    tokens: Tensor<2, Int>,
    targets: Tensor<2, Int>,
}

#[derive(Clone, Default)]
struct TokenBatcher;

impl Batcher<Tokens, TokenBatch> for TokenBatcher {
    fn batch(&self, items: Vec<Tokens>, device: &Device) -> TokenBatch {
        let n = items.len();
        let tokens: Vec<i64> = items.iter().flat_map(|s| s.tokens).collect();
        let tags: Vec<i64> = items.iter().flat_map(|s| s.tags).collect();
        TokenBatch {
            tokens: Tensor::from_data(TensorData::new(tokens, [n, LENGTH]), device),
            targets: Tensor::from_data(TensorData::new(tags, [n, LENGTH]), device),
        }
    }
}

/// `count` sequences of uniform tokens from `data`'s generator, tagged with the sequence
/// reversed.
fn sequences(data: &Device, count: usize) -> Vec<Tokens> {
    let last = VOCABULARY as i64 - 1;
    uniform(data, count * LENGTH, 0.0, VOCABULARY as f64)
        .chunks(LENGTH)
        .map(|u| {
            let tokens: [i64; LENGTH] = std::array::from_fn(|i| (u[i] as i64).min(last));
            let tags = std::array::from_fn(|i| tokens[LENGTH - 1 - i]);
            Tokens { tokens, tags }
        })
        .collect()
}

/// The command line.
struct Args {
    task: String,
    epochs: usize,
    artifact_dir: Option<PathBuf>,
    /// The global batch (docs/learner.md, "The batch size").
    batch_size: usize,
}

const USAGE: &str = "expected --task regression|sequence, --epochs N (default 3), \
--artifact-dir DIR (default tasks_learner-TASK in the temporary directory), --batch-size GLOBAL \
(default 32)";

impl Args {
    fn parse() -> Result<Args, Error> {
        let mut a = Args {
            task: String::new(),
            epochs: 3,
            artifact_dir: None,
            batch_size: 32,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or(format!("{flag} needs a value"));
            match flag.as_str() {
                "--task" => a.task = value()?,
                "--epochs" => a.epochs = value()?.parse()?,
                "--artifact-dir" => a.artifact_dir = Some(PathBuf::from(value()?)),
                "--batch-size" => a.batch_size = value()?.parse()?,
                _ => return Err(format!("unknown flag {flag:?}: {USAGE}").into()),
            }
        }
        match a.task.as_str() {
            "regression" | "sequence" => Ok(a),
            "" => Err(format!("--task is required: {USAGE}").into()),
            other => Err(format!("--task {other:?}: expected regression or sequence").into()),
        }
    }
}

/// The training, the same for both tasks but for the model, its data and its metrics.
fn train<M: LearnerModel>(
    args: &Args,
    training: SupervisedTraining<M>,
    model: M,
    device: &Device,
) -> Result<(), Error> {
    let training = training
        .with_default_checkpointers()
        .num_epochs(args.epochs)
        .summary()
        // The training strategy, the one phalanx line:
        .with_training_strategy(phalanx_learner::Distributed::new(device.clone())?.into());
    let learner = Learner::new(model, AdamConfig::new().init(), 3e-3);
    common::finish(training.launch(learner))
}

fn main() -> Result<(), Error> {
    let args = Args::parse()?;
    // The synthetic data first, the same draws on every rank (and in every run) from a fixed
    // seed; then the training device, seeded for the model's initialization.
    let data = Device::flex();
    data.seed(7);
    let (points, sequences) = match args.task.as_str() {
        "regression" => (Some((points(&data, TRAIN), points(&data, VALID))), None),
        _ => (
            None,
            Some((sequences(&data, TRAIN), sequences(&data, VALID))),
        ),
    };
    let device = Device::flex().autodiff();
    device.seed(42);
    let dir = args
        .artifact_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("tasks_learner-{}", args.task)));
    let per_rank = common::batch_size_per_rank(args.batch_size)?;
    if let Some((train_set, valid_set)) = points {
        let loader_train = DataLoaderBuilder::new(PointBatcher)
            .batch_size(per_rank)
            .shuffle(42)
            .build(InMemDataset::new(train_set));
        let loader_valid = DataLoaderBuilder::new(PointBatcher)
            .batch_size(VALID)
            .build(InMemDataset::new(valid_set));
        let training =
            SupervisedTraining::new(&dir, loader_train, loader_valid).metrics((LossMetric::new(),));
        train(&args, training, Mlp::new(&device), &device)
    } else if let Some((train_set, valid_set)) = sequences {
        let loader_train = DataLoaderBuilder::new(TokenBatcher)
            .batch_size(per_rank)
            .shuffle(42)
            .build(InMemDataset::new(train_set));
        let loader_valid = DataLoaderBuilder::new(TokenBatcher)
            .batch_size(VALID)
            .build(InMemDataset::new(valid_set));
        let training = SupervisedTraining::new(&dir, loader_train, loader_valid)
            .metrics((AccuracyMetric::new(), LossMetric::new()));
        train(&args, training, Tagger::new(&device), &device)
    } else {
        unreachable!("Args::parse accepts regression and sequence only")
    }
}
