//! Without a launcher, `Distributed` is Burn's single-device training: the same Learner
//! program with burn-train's default strategy and with `Distributed` ends with bitwise-equal
//! parameters (a group of one: DDP's average over one rank is the gradient itself).

use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataset::InMemDataset;
use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, Relu};
use burn::optim::AdamConfig;
use burn::tensor::{Device, Tensor};
use burn_train::logger::InMemoryMetricLogger;
use burn_train::metric::{AccuracyMetric, LossMetric};
use burn_train::{ClassificationOutput, Learner, SupervisedTraining};

use crate::common;
use common::{classification, classifier_steps, digits, Batch, Stack};

#[derive(Module, Debug)]
struct Net {
    hidden: Linear,
    norm: BatchNorm,
    out: Linear,
    relu: Relu,
}

impl Net {
    fn classify(&self, batch: Batch) -> ClassificationOutput {
        let x = self.relu.forward(self.hidden.forward(batch.x));
        // BatchNorm over features: [batch, 32] as [batch, 32, 1].
        let [n, d] = x.dims();
        let x = self.norm.forward(x.reshape([n, d, 1])).reshape([n, d]);
        classification(self.out.forward(x), batch.y)
    }
}

classifier_steps!(Net);

/// Trains 2 epochs on the digits with burn-train's default strategy or `Distributed`, with
/// gradient accumulation or not; the parameters' bits.
fn train(distributed: bool, accumulation: Option<usize>) -> Vec<u32> {
    let device = Device::flex().autodiff();
    device.seed(7);
    let (train, valid) = phalanx_data::digits().unwrap().split(0.2, 0).unwrap();
    let loader = |d, shuffle: bool| {
        let b = DataLoaderBuilder::new(Stack).batch_size(32);
        let b = if shuffle { b.shuffle(3) } else { b };
        b.build(InMemDataset::new(digits(d)))
    };
    let dir = phalanx_testing::process::TempDir::new("learner-single");
    let training = SupervisedTraining::new(dir.path(), loader(&train, true), loader(&valid, false))
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .with_metric_logger(InMemoryMetricLogger::new())
        .with_application_logger(None)
        .num_epochs(2);
    let training = match accumulation {
        Some(k) => training.grads_accumulation(k),
        None => training,
    };
    let training = match distributed {
        true => training.with_training_strategy(
            phalanx_learner::Distributed::new(device.clone())
                .unwrap()
                .with_report(Vec::<String>::new())
                .into(),
        ),
        false => training,
    };
    let net = Net {
        hidden: LinearConfig::new(64, 32).init(&device),
        norm: BatchNormConfig::new(32).init(&device),
        out: LinearConfig::new(32, 10).init(&device),
        relu: Relu::new(),
    };
    let before = bits(&net);
    let result = training.launch(Learner::new(net, AdamConfig::new().init(), 1e-2));
    assert!(result.error.is_none(), "{:?}", result.error);
    let after = bits(&result.model);
    assert!(before != after, "nothing trained");
    after
}

fn bits(model: &Net) -> Vec<u32> {
    struct Bits(Vec<u32>);
    impl ModuleVisitor for Bits {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let v = param.val().into_data().try_to_vec::<f32>().unwrap();
            self.0.extend(v.iter().map(|x| x.to_bits()));
        }
    }
    let mut b = Bits(Vec::new());
    model.visit(&mut b);
    b.0
}

#[test]
fn one_process_is_burns_single_device_training() {
    // Both in one test: the device's generator is process-wide, so the two runs must not
    // interleave with another test's.
    let burn = train(false, None);
    let ours = train(true, None);
    assert_eq!(burn.len(), ours.len());
    assert!(
        burn == ours,
        "parameters differ from burn-train's default strategy"
    );
    let burn = train(false, Some(3));
    let ours = train(true, Some(3));
    assert!(
        burn == ours,
        "with gradient accumulation, parameters differ"
    );
}
