//! What the in-process Learner tests share: a batch of digits and the two step traits of a
//! classifier.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use burn::data::dataloader::batcher::Batcher;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_train::ClassificationOutput;
use phalanx_testing::process::{clean_env, run, test_path, Finished};

/// A batch of UCI digits: 64 features per row.
#[derive(Clone, Debug)]
pub(crate) struct Batch {
    pub(crate) x: Tensor<2>,
    pub(crate) y: Tensor<1, Int>,
}

/// One digit: its features and label.
pub(crate) type Digit = (Vec<f32>, i64);

/// The rows of `d` as items.
pub(crate) fn digits(d: &phalanx_data::Dataset) -> Vec<Digit> {
    d.features()
        .chunks(64)
        .zip(d.labels())
        .map(|(x, &y)| (x.to_vec(), y))
        .collect()
}

/// Stacks digits into a batch on `device`.
pub(crate) fn stack(items: &[Digit], device: &Device) -> Batch {
    let n = items.len();
    let x: Vec<f32> = items.iter().flat_map(|i| i.0.iter().copied()).collect();
    let y: Vec<i64> = items.iter().map(|i| i.1).collect();
    Batch {
        x: Tensor::from_data(TensorData::new(x, [n, 64]), device),
        y: Tensor::from_data(TensorData::new(y, [n]), device),
    }
}

/// A batcher that stacks digits.
pub(crate) struct Stack;

impl Batcher<Digit, Batch> for Stack {
    fn batch(&self, items: Vec<Digit>, device: &Device) -> Batch {
        stack(&items, device)
    }
}

/// The cross-entropy of `output` (logits) against the labels `y`, as burn-train's
/// classification output.
pub(crate) fn classification(output: Tensor<2>, y: Tensor<1, Int>) -> ClassificationOutput {
    let loss = CrossEntropyLossConfig::new()
        .init(&output.device())
        .forward(output.clone(), y.clone());
    ClassificationOutput::new(loss, output, y)
}

/// Runs the `worker` test of the module `module` (the caller's `module_path!()`) of this test
/// binary on 2 ranks under the real `phalanx launch`, with `role` set to `mode` and `env` in
/// their environment, and waits for the launcher within `deadline`. `None` (the test skips)
/// when `target/debug/phalanx` is not built.
pub(crate) fn launch_workers(
    module: &str,
    role: &str,
    mode: &str,
    env: &[(&str, &std::path::Path)],
    deadline: Duration,
) -> Option<Finished> {
    let exe = std::env::current_exe().unwrap();
    let phalanx: PathBuf = exe.parent()?.parent()?.join("phalanx");
    if !phalanx.exists() {
        eprintln!(
            "skipped: {} is not built (cargo build -p phalanx-cli)",
            phalanx.display()
        );
        return None;
    }
    let mut cmd = Command::new(phalanx);
    clean_env(&mut cmd)
        .env(role, mode)
        .envs(env.iter().copied())
        .args(["launch", "--standalone", "--nproc-per-node", "2", "--"])
        .arg(exe)
        .args(["--exact", &test_path(module, "worker")])
        .args(["--nocapture", "--test-threads", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Some(run(cmd, deadline))
}

/// `TrainStep` and `InferenceStep` for a model with
/// `fn classify(&self, Batch) -> ClassificationOutput`, as a Learner program writes them.
macro_rules! classifier_steps {
    ($model:ty) => {
        impl burn_train::TrainStep for $model {
            type Input = common::Batch;
            type Output = burn_train::ClassificationOutput;
            fn step(
                &self,
                batch: common::Batch,
            ) -> burn_train::TrainOutput<burn_train::ClassificationOutput> {
                let item = self.classify(batch);
                burn_train::TrainOutput::new(self, item.loss.backward(), item)
            }
        }

        impl burn_train::InferenceStep for $model {
            type Input = common::Batch;
            type Output = burn_train::ClassificationOutput;
            fn step(&self, batch: common::Batch) -> burn_train::ClassificationOutput {
                self.classify(batch)
            }
        }
    };
}
pub(crate) use classifier_steps;
