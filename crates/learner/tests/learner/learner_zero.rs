//! The Learner under `Distributed::with_sharding(Sharding::Optimizer)` (Note [Learner ZeRO]):
//! on 2 ranks under the real `phalanx launch`, the same training as DDP bit for bit (Adam, so
//! that there is optimizer state to shard; uneven shares, so that `join` steps too), each
//! rank keeping the optimizer state of its own tensors only; a run checkpointed after epoch 1
//! and resumed for epoch 2 bitwise equal to the uninterrupted one (the checkpoint holds every
//! rank's share); the modes the Learner cannot have refused naming why. The workers are this
//! test binary itself, run again under the launcher with `LEARNER_ZERO_WORKER` set.

use std::path::PathBuf;
use std::time::Duration;

use crate::common;
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataset::InMemDataset;
use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::AdamConfig;
use burn::tensor::{Device, Tensor};
use burn_train::logger::InMemoryMetricLogger;
use burn_train::metric::{AccuracyMetric, LossMetric};
use burn_train::{ClassificationOutput, Learner, SupervisedTraining};
use common::{classification, classifier_steps, digits, Batch, Stack};
use phalanx_ddp::fsdp::Sharding;
use phalanx_testing::process::{rank_lines, Finished, TempDir};

const ROLE: &str = "LEARNER_ZERO_WORKER";
/// The artifact directory the ranks of a checkpointed run share.
const DIR: &str = "LEARNER_ZERO_DIR";
const DEADLINE: Duration = Duration::from_secs(300);

#[derive(Module, Debug)]
struct Net {
    hidden: Linear,
    relu: Relu,
    out: Linear,
}

impl Net {
    fn classify(&self, batch: Batch) -> ClassificationOutput {
        let hidden = self.relu.forward(self.hidden.forward(batch.x));
        classification(self.out.forward(hidden), batch.y)
    }
}

classifier_steps!(Net);

/// FNV-1a over the bits of every float of the model, in visiting order.
struct Fnv(u64);

impl ModuleVisitor for Fnv {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        for v in param.val().into_data().try_to_vec::<f32>().unwrap() {
            for b in v.to_le_bytes() {
                self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
}

/// One rank of a job: `ddp` or `zero` (`--sharding optimizer`) trains 2 epochs with Adam and
/// prints its digest; `first` is `zero` for 1 epoch with burn-train's default checkpointers in
/// the shared directory, `resume` the same for 2 epochs from its epoch-1 checkpoint.
fn work(mode: &str) {
    let rank: usize = std::env::var("RANK").unwrap().parse().unwrap();
    let device = Device::flex().autodiff();
    device.seed(7);
    let (train, valid) = phalanx_data::digits().unwrap().split(0.2, 0).unwrap();
    // 1,437 digits in batches of 32: 45 batches, 23 for rank 0 and 22 for rank 1 (join steps).
    let train_loader = DataLoaderBuilder::new(Stack)
        .batch_size(32)
        .shuffle(1)
        .build(InMemDataset::new(digits(&train)));
    let valid_loader = DataLoaderBuilder::new(Stack)
        .batch_size(128)
        .build(InMemDataset::new(digits(&valid)));
    let sharding = match mode {
        "ddp" => Sharding::None,
        _ => Sharding::Optimizer,
    };
    let strategy = phalanx_learner::Distributed::new(device.clone())
        .unwrap()
        .with_sharding(sharding)
        .unwrap();
    let own = TempDir::new(&format!("learner-zero-{rank}"));
    let dir = match std::env::var(DIR) {
        Ok(shared) => PathBuf::from(shared),
        Err(_) => own.path().to_path_buf(),
    };
    let epochs = if mode == "first" { 1 } else { 2 };
    let mut training = SupervisedTraining::new(&dir, train_loader, valid_loader)
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .with_metric_logger(InMemoryMetricLogger::new())
        .with_application_logger(None)
        .num_epochs(epochs)
        .with_training_strategy(strategy.into());
    if mode == "first" || mode == "resume" {
        training = training.with_default_checkpointers();
    }
    if mode == "resume" {
        training = training.checkpoint(1);
    }
    let net = Net {
        hidden: LinearConfig::new(64, 32).init(&device),
        relu: Relu::new(),
        out: LinearConfig::new(32, 10).init(&device),
    };
    let result = training.launch(Learner::new(net, AdamConfig::new().init(), 1e-2));
    let mut fnv = Fnv(0xcbf2_9ce4_8422_2325);
    result.model.visit(&mut fnv);
    println!("rank {rank}: digest {:016x}", fnv.0);
}

#[test]
fn worker() {
    if let Ok(mode) = std::env::var(ROLE) {
        work(&mode);
    }
}

fn launch(mode: &str) -> Option<Finished> {
    common::launch_workers(module_path!(), ROLE, mode, &[], DEADLINE)
}

/// [`launch`] with the ranks sharing `dir` as their artifact directory.
fn launch_in(mode: &str, dir: &TempDir) -> Option<Finished> {
    common::launch_workers(module_path!(), ROLE, mode, &[(DIR, dir.path())], DEADLINE)
}

/// Each rank's digest, and rank 0's validation accuracy per epoch.
fn outcome(f: &Finished) -> (Vec<String>, Vec<f64>) {
    f.assert_ok();
    let lines = rank_lines(&f.stdout);
    let mut digests: Vec<(u32, String)> = lines
        .iter()
        .filter_map(|(r, l)| Some((*r, l.split("digest ").nth(1)?.trim().to_string())))
        .collect();
    digests.sort();
    let accuracy = lines
        .iter()
        .filter(|(_, l)| l.starts_with("epoch ") && l.contains(" valid "))
        .map(|(_, l)| {
            let after = l.split("Accuracy ").nth(1).unwrap();
            after.split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect();
    (digests.into_iter().map(|(_, d)| d).collect(), accuracy)
}

#[test]
fn zero_1_trains_bitwise_as_ddp_with_each_rank_keeping_its_tensors_state() {
    let Some(ddp) = launch("ddp") else {
        return;
    };
    let Some(zero) = launch("zero") else {
        return;
    };
    let (ddp_digests, ddp_accuracy) = outcome(&ddp);
    let (zero_digests, zero_accuracy) = outcome(&zero);
    assert_eq!(ddp_digests.len(), 2, "{}", ddp.stdout);
    assert_eq!(zero_digests.len(), 2, "{}", zero.stdout);
    assert_eq!(zero_digests[0], zero_digests[1], "replicas differ");
    assert_eq!(zero_digests, ddp_digests, "ZeRO-1 is not DDP's training");
    assert_eq!(ddp_accuracy.len(), 2, "{}", ddp.stdout);
    assert_eq!(zero_accuracy, ddp_accuracy);
    assert!(zero_accuracy[1] > 80.0, "{zero_accuracy:?}");
    // hidden.weight (2,048) to rank 0; out.weight (320), hidden.bias (32), out.bias (10) to 1.
    assert!(
        zero.stdout
            .contains("each rank keeps the optimizer state of its tensors (rank 0: 2048 elements)"),
        "{}",
        zero.stdout
    );
}

#[test]
fn a_zero_1_checkpoint_holds_every_rank_s_state_and_resumes_bitwise() {
    let dir = TempDir::new("learner-zero-resume");
    let Some(first) = launch_in("first", &dir) else {
        return;
    };
    first.assert_ok();
    let Some(resumed) = launch_in("resume", &dir) else {
        return;
    };
    let Some(whole) = launch("zero") else {
        return;
    };
    let (resumed_digests, _) = outcome(&resumed);
    let (whole_digests, _) = outcome(&whole);
    assert_eq!(resumed_digests.len(), 2, "{}", resumed.stdout);
    // Adam's moments of rank 1's tensors came back from the checkpoint rank 0 wrote: without
    // them the second epoch would step those tensors differently (the same parameters are the
    // same validation accuracy).
    assert_eq!(resumed_digests, whole_digests, "{}", resumed.stdout);
}

#[test]
fn the_modes_the_learner_cannot_have_are_refused_naming_why() {
    for (sharding, why) in [
        (Sharding::Grad, "the whole averaged gradient"),
        (Sharding::Full, "no parameters to free"),
        (Sharding::Hybrid, "no parameters to free"),
    ] {
        let strategy = phalanx_learner::Distributed::new(Device::flex()).unwrap();
        let Err(e) = strategy.with_sharding(sharding) else {
            panic!("{sharding:?} accepted");
        };
        let e = e.to_string();
        assert!(
            e.starts_with(&format!("phalanx-learner: sharding {}: ", sharding.name())),
            "{e}"
        );
        assert!(e.contains(why), "{e}");
    }
}
