//! `phalanx bench train`: samples/s of the training step (DDP, or a sharded mode) for world size
//! 1 and N on synthetic MNIST-shaped data, with the scaling efficiency `sps(N) / (N · sps(1))`,
//! and the training state each rank holds (parameters, gradients, optimizer state) next to
//! its peak resident memory. Each world size and mode runs as its own job (`phalanx launch`
//! of this command), one after another; `--rounds K` repeats them in turn (A B A B …) and
//! reports medians, so that modes are compared in one run, interleaved.

use std::{
    process::{Command, ExitCode, Stdio},
    sync::Arc,
};

use anyhow::{bail, Context};
use phalanx_pg::BackendType;
use phalanx_train::throughput::{self, ThroughputConfig};
use phalanx_train::Sharding;
use serde::{Deserialize, Serialize};

/// Flags of `phalanx bench train`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    launch: phalanx_launch::LaunchArgs,
    /// World sizes to measure, run one after another (default: 1 and --nproc-per-node, or 1,2).
    #[arg(long, value_delimiter = ',')]
    worlds: Vec<u32>,
    /// Model: `mlp` (the seed's, sized by --hidden and --depth), `cnn` or `transformer`
    /// (`phalanx train --model`).
    #[arg(long, default_value = "mlp")]
    model: phalanx_train::ModelKind,
    /// Optimizer: `sgd` (lr 0.01), `adam` or `adamw` (lr 1e-3).
    #[arg(long, default_value = "sgd")]
    optimizer: phalanx_train::OptimizerKind,
    /// Hidden width (2048 with --depth 2 is the communication-heavy case).
    #[arg(long, default_value_t = 128)]
    hidden: usize,
    /// Hidden layers.
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Samples per step on each rank.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Timed steps.
    #[arg(long, default_value_t = 100)]
    steps: usize,
    /// Untimed steps before timing.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// bf16 gradient compression.
    #[arg(long)]
    bf16: bool,
    /// Sharding modes to measure, comma-separated (`none`, `optimizer`, `grad`, `full`:
    /// `phalanx train --sharding`); each is its own job.
    #[arg(long, value_delimiter = ',', default_value = "none")]
    sharding: Vec<Sharding>,
    /// Under `full`: FSDP2's `reshard_after_forward` (`phalanx train --reshard-after-forward`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    reshard_after_forward: bool,
    /// Rounds: every (world, mode) job runs once per round, in turn; medians are reported.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// One JSON object per world size instead of the table.
    #[arg(long)]
    json: bool,
    /// Process-group backend: `native`, or `mpi`, which measures the one world `mpirun -np N`
    /// started (no efficiency column: that needs a 1-rank run).
    #[arg(long, default_value = "native", env = "PHALANX_BACKEND")]
    backend: BackendType,
}

const MARK: &str = "PHALANX-BENCH-TRAIN ";

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.steps == 0 || args.batch_size == 0 {
        bail!("--steps and --batch-size must be at least 1");
    }
    crate::cmd::train::setup::check_backend(args.backend)?;
    if args.backend == BackendType::Mpi {
        // mpirun started the ranks: measure this world, and rank 0 prints its row.
        if let Some(row) = measure(&args)? {
            print_rows(&args, &[row]);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if phalanx_launch::started_by_launcher() {
        if let Some(row) = measure(&args)? {
            let json = serde_json::to_string(&row).expect("a row serialises");
            println!("{MARK}{json}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let nproc = if std::env::args().any(|a| a.starts_with("--nproc-per-node")) {
        args.launch.nproc_per_node
    } else {
        2
    };
    let worlds = if args.worlds.is_empty() {
        vec![1, nproc]
    } else {
        args.worlds.clone()
    };
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let exe = std::env::current_exe()?;
    // Every round runs every (world, mode) job once, in the same order: A B A B …
    let mut rounds: Vec<Vec<Row>> = Vec::new();
    for _ in 0..args.rounds {
        let mut rows = Vec::new();
        for &w in &worlds {
            for &sharding in &args.sharding {
                rows.push(run_job(&args, &exe, w, sharding)?);
            }
        }
        rounds.push(rows);
    }
    print_rows(&args, &medians(rounds));
    Ok(ExitCode::SUCCESS)
}

/// One `phalanx launch` of this command on `w` ranks under `sharding`: its rank 0's row.
fn run_job(args: &Args, exe: &std::path::Path, w: u32, sharding: Sharding) -> anyhow::Result<Row> {
    let mut cmd = Command::new(exe);
    cmd.args([
        "launch",
        "--standalone",
        "--nproc-per-node",
        &w.to_string(),
        "--",
    ])
    .arg(exe)
    .args([
        "bench",
        "train",
        "--model",
        &args.model.to_string(),
        "--optimizer",
        &args.optimizer.to_string(),
        "--hidden",
        &args.hidden.to_string(),
        "--depth",
        &args.depth.to_string(),
        "--sharding",
        sharding.name(),
        "--reshard-after-forward",
        &args.reshard_after_forward.to_string(),
    ])
    .args([
        "--batch-size",
        &args.batch_size.to_string(),
        "--steps",
        &args.steps.to_string(),
    ])
    .args(["--warmup", &args.warmup.to_string()])
    .stdin(Stdio::null())
    .stderr(Stdio::inherit());
    if args.bf16 {
        cmd.arg("--bf16");
    }
    let out = cmd
        .output()
        .with_context(|| format!("running the {w}-rank job"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "the {w}-rank --sharding {sharding} job failed ({}):\n{text}",
            out.status
        );
    }
    let line = text
        .lines()
        .find_map(|l| l.split_once(MARK).map(|(_, j)| j.to_string()))
        .with_context(|| format!("the {w}-rank job printed no result:\n{text}"))?;
    serde_json::from_str(&line).with_context(|| format!("the {w}-rank job's result {line:?}"))
}

/// Per (world, mode), the round with the median samples/s (its memory figures with it).
fn medians(rounds: Vec<Vec<Row>>) -> Vec<Row> {
    let jobs = rounds.first().map_or(0, Vec::len);
    (0..jobs)
        .map(|k| {
            let mut runs: Vec<&Row> = rounds.iter().map(|r| &r[k]).collect();
            runs.sort_by(|a, b| a.samples_per_s.total_cmp(&b.samples_per_s));
            let mut row = runs[runs.len() / 2].clone();
            row.rounds = runs.len();
            row
        })
        .collect()
}

/// One world size's measurement: what a `--json` line holds, and what each measuring job
/// hands back to the parent after [`MARK`].
#[derive(Serialize, Deserialize, Clone)]
struct Row {
    bench: String,
    model: String,
    optimizer: String,
    sharding: String,
    world: usize,
    hidden: usize,
    depth: usize,
    batch: usize,
    samples_per_s: f64,
    step_ms: f64,
    comm_fraction: f64,
    /// Peak RSS during the timed steps, and before them (building and wrapping the model, the
    /// warm-up), MiB, max over ranks.
    peak_rss_mib: f64,
    #[serde(default)]
    build_rss_mib: f64,
    /// The training state one rank holds between steps (max over ranks), MiB.
    params_mib: f64,
    grads_mib: f64,
    optim_mib: f64,
    /// Rounds measured (the row is the median one's).
    #[serde(default)]
    rounds: usize,
    /// samples/s per rank over the 1-rank run's (`None` until both are known).
    #[serde(skip_serializing_if = "Option::is_none")]
    scaling_efficiency: Option<f64>,
}

/// The table (or JSON lines) of the measured world sizes.
fn print_rows(args: &Args, rows: &[Row]) {
    // Efficiency against the 1-rank run of the same mode; speed against DDP at the same world.
    let base = |r: &Row| {
        rows.iter()
            .find(|b| b.world == 1 && b.sharding == r.sharding)
            .map(|b| b.samples_per_s)
    };
    let ddp = |r: &Row| {
        rows.iter()
            .find(|b| b.world == r.world && b.sharding == "none")
            .map(|b| b.samples_per_s)
    };
    if !args.json {
        let model = match args.model {
            phalanx_train::ModelKind::Mlp => format!("MLP 784-{}x{}-10", args.hidden, args.depth),
            other => other.to_string(),
        };
        println!(
            "# phalanx bench train: {model}, {}, batch {}/rank, {} steps{}, medians of {} round(s)",
            args.optimizer,
            args.batch_size,
            args.steps,
            if args.bf16 { ", bf16 gradients" } else { "" },
            args.rounds
        );
        println!(
            "{:>6} {:>10} {:>12} {:>10} {:>7} {:>6} {:>6} {:>11} {:>11} {:>11} {:>11} {:>10} {:>10}",
            "world",
            "sharding",
            "samples/s",
            "step(ms)",
            "comm",
            "eff",
            "x ddp",
            "params(MiB)",
            "grads(MiB)",
            "optim(MiB)",
            "state(MiB)",
            "rss(MiB)",
            "build(MiB)"
        );
    }
    for r in rows {
        let eff = base(r).map(|b| r.samples_per_s / (r.world as f64 * b));
        if args.json {
            let row = Row {
                scaling_efficiency: eff,
                ..r.clone()
            };
            println!("{}", serde_json::to_string(&row).expect("a row serialises"));
        } else {
            println!(
                "{:>6} {:>10} {:>12.0} {:>10.2} {:>6.1}% {:>6} {:>6} {:>11.1} {:>11.1} {:>11.1} {:>11.1} {:>10.0} {:>10.0}",
                r.world,
                r.sharding,
                r.samples_per_s,
                r.step_ms,
                100.0 * r.comm_fraction,
                eff.map_or("-".into(), |e| format!("{e:.2}")),
                ddp(r).map_or("-".into(), |d| format!("{:.2}", r.samples_per_s / d)),
                r.params_mib,
                r.grads_mib,
                r.optim_mib,
                r.params_mib + r.grads_mib + r.optim_mib,
                r.peak_rss_mib,
                r.build_rss_mib
            );
        }
    }
}

/// Measures this rank's world; rank 0 returns its row.
fn measure(args: &Args) -> anyhow::Result<Option<Row>> {
    crate::cmd::limit_compute_threads();
    let pg = Arc::new(crate::cmd::train::setup::join_group(args.backend)?);
    let t = phalanx_train::on_compute_pool(|| {
        throughput::measure(
            pg.clone(),
            &ThroughputConfig {
                model: args.model,
                optimizer: args.optimizer,
                hidden: args.hidden,
                depth: args.depth,
                batch_size: args.batch_size,
                steps: args.steps,
                warmup: args.warmup,
                bf16: args.bf16,
                sharding: args.sharding.first().copied().unwrap_or_default(),
                reshard_after_forward: args.reshard_after_forward,
            },
        )
    })?;
    Ok((pg.rank() == 0).then(|| Row {
        bench: "train".into(),
        model: args.model.to_string(),
        optimizer: args.optimizer.to_string(),
        sharding: args
            .sharding
            .first()
            .copied()
            .unwrap_or_default()
            .to_string(),
        world: t.world,
        hidden: args.hidden,
        depth: args.depth,
        batch: args.batch_size,
        samples_per_s: t.samples_per_s,
        step_ms: t.step_ms,
        comm_fraction: t.comm_fraction,
        peak_rss_mib: t.peak_rss_mib,
        build_rss_mib: t.build_rss_mib,
        params_mib: t.state.params_mib,
        grads_mib: t.state.grads_mib,
        optim_mib: t.state.optim_mib,
        rounds: 1,
        scaling_efficiency: None,
    }))
}
