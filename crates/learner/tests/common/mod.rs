//! What the in-process Learner tests share: a batch of digits and the two step traits of a
//! classifier.
#![allow(dead_code)]

use burn::tensor::{Device, Int, Tensor, TensorData};

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
