//! A burn-train Learner program on MNIST, in two files that differ in one line, the training
//! strategy: `mnist_burn.rs` trains with Burn's single-device strategy, `mnist_learner.rs` with
//! phalanx's `Distributed`, and runs on one process or on every process of a job
//! (`tests/learner/learner_launch.rs` checks that the strategy is the only difference).
//!
//! Written the way Burn's book writes one: a model (Conv2d, BatchNorm, Dropout, Linear) and a
//! `Batcher` (in `mnist/mod.rs`), `SupervisedTraining` with loss and accuracy metrics and a
//! checkpointer. On the MNIST sample shipped in `data/` (4,000 images to train on, 1,000 to
//! validate), in seconds:
//!
//! ```sh
//! cargo run --release -p phalanx-learner --example mnist_learner           # one process
//! cargo build --release -p phalanx-learner --example mnist_learner
//! phalanx launch --nproc-per-node 2 -- target/release/examples/mnist_learner # two
//! ```
//!
//! Flags: `--epochs N` (default 2), `--artifact-dir DIR` (metric logs and checkpoints; default
//! `mnist_learner` in the system's temporary directory), `--batch-size B` (the global batch,
//! default 64: each of W processes loads B / W), `--grads-accumulation K`, `--dropout P`,
//! `--model small|cnn` (`cnn`: `phalanx train --model cnn`'s layers, for the benchmark),
//! `--resume auto` (continue after the newest complete checkpoint in the artifact directory,
//! as a run restarted by `phalanx launch --max-restarts` must), `--evaluate` (the newest
//! checkpoint's accuracy on the whole validation set, in one process). At the end every rank
//! prints a digest of its parameters and BatchNorm statistics: equal digests, equal replicas.

use burn::data::dataloader::DataLoaderBuilder;
use burn::optim::AdamConfig;
use burn::tensor::Device;
use burn_train::metric::{AccuracyMetric, LossMetric};
use burn_train::{Learner, SupervisedTraining};

mod common;
mod mnist;
use mnist::{Args, MnistBatcher, Model};

fn main() -> Result<(), common::Error> {
    let args = Args::parse()?;
    let device = Device::flex().autodiff();
    device.seed(42);
    let (train, valid) = mnist::datasets()?;
    let loader_train = DataLoaderBuilder::new(MnistBatcher)
        .batch_size(args.batch_size_per_rank()?)
        .shuffle(42)
        .build(train);
    let loader_valid = DataLoaderBuilder::new(MnistBatcher)
        .batch_size(256)
        .build(valid);

    let mut training = SupervisedTraining::new(&args.artifact_dir, loader_train, loader_valid)
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .with_default_checkpointers()
        .num_epochs(args.epochs)
        .summary()
        // The training strategy, the one line the two programs differ in:
        .with_training_strategy(burn_train::ExecutionStrategy::SingleDevice(device.clone()).into());
    if let Some(k) = args.grads_accumulation {
        training = training.grads_accumulation(k);
    }
    if let Some(epoch) = args.resume_from() {
        training = training.checkpoint(epoch);
    }
    let learner = Learner::new(Model::new(&device, &args), AdamConfig::new().init(), 1e-3);
    common::finish(training.launch(learner))
}
