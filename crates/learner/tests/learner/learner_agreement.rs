//! Every rank stops after the same epoch (Note [Epoch agreement]): rank 0's early stopping,
//! and an interruption on rank 1 in the middle of an epoch, on 2 ranks under the real
//! `phalanx launch`. The workers are this test binary itself, run again under the launcher
//! with `LEARNER_AGREEMENT_WORKER` set (the `worker` test below); each counts the train batches
//! its loader built to tell how many epochs it ran.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::SgdConfig;
use burn::tensor::Device;
use burn_train::logger::InMemoryMetricLogger;
use burn_train::metric::store::{Aggregate, Direction, Split};
use burn_train::metric::LossMetric;
use burn_train::{
    ClassificationOutput, Interrupter, Learner, MetricEarlyStoppingStrategy, StoppingCondition,
    SupervisedTraining,
};
use common::{classification, classifier_steps, digits, stack, Batch, Digit};
use phalanx_testing::process::{clean_env, rank_lines, run, test_path, TempDir};

const ROLE: &str = "LEARNER_AGREEMENT_WORKER";
const DEADLINE: Duration = Duration::from_secs(300);
/// 1,437 training digits in batches of 32.
const BATCHES_PER_EPOCH: usize = 45;
const EPOCHS: usize = 6;

#[derive(Module, Debug)]
struct Net {
    linear: Linear,
}

impl Net {
    fn classify(&self, batch: Batch) -> ClassificationOutput {
        classification(self.linear.forward(batch.x), batch.y)
    }
}

classifier_steps!(Net);

/// Stacks digits; counts the batches it built and, when given an interrupter, stops the
/// training once it has built `stop_after`.
struct Counting {
    built: Arc<AtomicUsize>,
    stop: Option<(Interrupter, usize)>,
    panic_at: Option<usize>,
}

impl Batcher<Digit, Batch> for Counting {
    fn batch(&self, items: Vec<Digit>, device: &Device) -> Batch {
        let built = self.built.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some((interrupter, after)) = &self.stop {
            if built == *after {
                interrupter.stop(Some("rank 1 was told to stop"));
            }
        }
        if self.panic_at == Some(built) {
            panic!("the batcher of this rank gives up at batch {built}");
        }
        stack(&items, device)
    }
}

/// One rank of a job: `early` (learning rate 0, so the validation loss never improves and
/// rank 0's early stopping ends the run after epoch 2) or `interrupt` (rank 1 stops itself
/// 15 batches into epoch 2) or `panic` (rank 1's batcher panics there) or `model` (rank 1
/// builds its layer without a bias) or `env` (only forms the process group).
fn work(mode: &str) {
    if mode == "env" {
        // Under a launcher whose environment lacks WORLD_SIZE: the error, not a panic.
        match phalanx_learner::Distributed::new(Device::flex().autodiff()) {
            Ok(_) => println!("joined"),
            Err(e) => println!("error: {e}"),
        }
        return;
    }
    let rank: usize = std::env::var("RANK").unwrap().parse().unwrap();
    let device = Device::flex().autodiff();
    device.seed(5);
    let (train, valid) = phalanx_data::digits().unwrap().split(0.2, 0).unwrap();
    let interrupter = Interrupter::new();
    let built = Arc::new(AtomicUsize::new(0));
    let stop = (mode == "interrupt" && rank == 1).then(|| (interrupter.clone(), 60));
    let panic_at = (mode == "panic" && rank == 1).then_some(60);
    let train_loader = DataLoaderBuilder::new(Counting {
        built: built.clone(),
        stop,
        panic_at,
    })
    .batch_size(32)
    .shuffle(1)
    .build(InMemDataset::new(digits(&train)));
    let valid_loader = DataLoaderBuilder::new(Counting {
        built: Arc::new(AtomicUsize::new(0)),
        stop: None,
        panic_at: None,
    })
    .batch_size(128)
    .build(InMemDataset::new(digits(&valid)));
    let dir = TempDir::new(&format!("learner-agreement-{rank}"));
    let mut training = SupervisedTraining::new(dir.path(), train_loader, valid_loader)
        .metrics((LossMetric::new(),))
        .with_metric_logger(InMemoryMetricLogger::new())
        .with_application_logger(None)
        .with_interrupter(interrupter)
        .num_epochs(EPOCHS)
        .with_training_strategy(
            phalanx_learner::Distributed::new(device.clone())
                .unwrap()
                .into(),
        );
    let lr = match mode {
        "early" => {
            training = training.early_stopping(MetricEarlyStoppingStrategy::new(
                &LossMetric::new(),
                Aggregate::Mean,
                Direction::Lowest,
                Split::Valid,
                StoppingCondition::NoImprovementSince { n_epochs: 1 },
            ));
            0.0
        }
        _ => 0.1,
    };
    // `model`: rank 1 was built with another model (no bias).
    let bias = !(mode == "model" && rank == 1);
    let net = Net {
        linear: LinearConfig::new(64, 10).with_bias(bias).init(&device),
    };
    let result = training.launch(Learner::new(net, SgdConfig::new().init(), lr));
    let epochs = built.load(Ordering::SeqCst).div_ceil(BATCHES_PER_EPOCH);
    let reason = result.interrupted.and_then(|i| i.reason);
    println!("rank {rank}: epochs {epochs} interrupted {reason:?}");
}

#[test]
fn worker() {
    if let Ok(mode) = std::env::var(ROLE) {
        work(&mode);
    }
}

/// Launches 2 workers in `mode` and waits for the launcher, within the deadline.
fn launch_raw(mode: &str) -> Option<phalanx_testing::process::Finished> {
    common::launch_workers(module_path!(), ROLE, mode, &[], DEADLINE)
}

/// Launches 2 workers in `mode`, which must succeed; each rank's line and the number of rank
/// 0's validation lines.
fn launch(mode: &str) -> Option<(Vec<(u32, String)>, usize)> {
    let f = launch_raw(mode)?;
    f.assert_ok();
    let lines = rank_lines(&f.stdout);
    let valid = lines
        .iter()
        .filter(|(_, l)| l.starts_with("epoch ") && l.contains(" valid "))
        .count();
    // libtest prints "test worker ... " on the same line before the worker's own words.
    let ends = lines
        .into_iter()
        .filter_map(|(r, l)| Some((r, l[l.find("rank ")?..].to_string())))
        .filter(|(_, l)| l.contains(": epochs "))
        .collect();
    Some((ends, valid))
}

#[test]
fn early_stopping_on_rank_0_stops_every_rank_after_the_same_epoch() {
    let Some((ends, valid)) = launch("early") else {
        return;
    };
    assert_eq!(valid, 2, "{ends:?}");
    assert_eq!(ends.len(), 2, "{ends:?}");
    for (rank, line) in &ends {
        assert_eq!(line, &format!("rank {rank}: epochs 2 interrupted None"));
    }
}

#[test]
fn an_interruption_on_rank_1_stops_every_rank_after_that_epoch() {
    let Some((ends, _)) = launch("interrupt") else {
        return;
    };
    assert_eq!(ends.len(), 2, "{ends:?}");
    for (rank, line) in &ends {
        let reason = match rank {
            0 => "Some(\"stopped on another rank\")",
            _ => "Some(\"rank 1 was told to stop\")",
        };
        assert_eq!(line, &format!("rank {rank}: epochs 2 interrupted {reason}"));
    }
}

#[test]
fn a_panic_on_rank_1_fails_the_job_naming_rank_1() {
    let Some(f) = launch_raw("panic") else {
        return;
    };
    assert_ne!(
        f.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        f.stdout,
        f.stderr
    );
    let all = format!("{}{}", f.stdout, f.stderr);
    assert!(
        all.contains("gives up at batch 60"),
        "the panic's message:\n{all}"
    );
    // Rank 0 names rank 1 and its panic (phalanx-pg fails a collective with the peer's reason).
    assert!(all.contains("rank 1 failed: panic"), "rank 1 named:\n{all}");
    assert!(f.elapsed < Duration::from_secs(60), "took {:?}", f.elapsed);
}

#[test]
fn a_rank_built_with_another_model_is_named_with_its_parameter() {
    let Some(f) = launch_raw("model") else {
        return;
    };
    assert_ne!(f.code(), Some(0), "{}", f.stdout);
    let all = format!("{}{}", f.stdout, f.stderr);
    assert!(
        all.contains("model mismatch: rank 1"),
        "rank 1 named:\n{all}"
    );
    assert!(all.contains("linear.bias"), "the parameter named:\n{all}");
}

#[test]
fn an_incomplete_launcher_environment_names_the_missing_variable() {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    clean_env(&mut cmd)
        .env(ROLE, "env")
        .env("RANK", "1")
        .args(["--exact", &test_path(module_path!(), "worker")])
        .args(["--nocapture", "--test-threads", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let f = run(cmd, DEADLINE);
    f.assert_ok();
    let error = f.stdout.lines().find_map(|l| l.split("error: ").nth(1));
    let error = error.unwrap_or_else(|| panic!("no error:\n{}", f.stdout));
    assert!(error.contains("WORLD_SIZE"), "{error}");
}
