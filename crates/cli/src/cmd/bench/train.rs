//! `phalanx bench train`: samples/s of the DDP training step for world size 1 and N on
//! synthetic MNIST-shaped data, with the scaling efficiency `sps(N) / (N · sps(1))`.
//! Each world size runs as its own job (`phalanx launch` of this command), one after another.

use std::{
    process::{Command, ExitCode, Stdio},
    sync::Arc,
};

use anyhow::{bail, Context};
use phalanx_pg::Backend;
use phalanx_train::throughput::{self, ThroughputConfig};
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
    /// One JSON object per world size instead of the table.
    #[arg(long)]
    json: bool,
    /// Process-group backend: `native`, or `mpi`, which measures the one world `mpirun -np N`
    /// started (no efficiency column: that needs a 1-rank run).
    #[arg(long, default_value = "native", env = "PHALANX_BACKEND")]
    backend: Backend,
}

const MARK: &str = "PHALANX-BENCH-TRAIN ";

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.steps == 0 || args.batch_size == 0 {
        bail!("--steps and --batch-size must be at least 1");
    }
    crate::cmd::train_setup::check_backend(args.backend)?;
    if args.backend == Backend::Mpi {
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
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    for w in worlds {
        let mut cmd = Command::new(&exe);
        cmd.args([
            "launch",
            "--standalone",
            "--nproc-per-node",
            &w.to_string(),
            "--",
        ])
        .arg(&exe)
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
            bail!("the {w}-rank job failed ({}):\n{text}", out.status);
        }
        let line = text
            .lines()
            .find_map(|l| l.split_once(MARK).map(|(_, j)| j.to_string()))
            .with_context(|| format!("the {w}-rank job printed no result:\n{text}"))?;
        let row: Row = serde_json::from_str(&line)
            .with_context(|| format!("the {w}-rank job's result {line:?}"))?;
        rows.push(row);
    }
    print_rows(&args, &rows);
    Ok(ExitCode::SUCCESS)
}

/// One world size's measurement: what a `--json` line holds, and what each measuring job
/// hands back to the parent after [`MARK`].
#[derive(Serialize, Deserialize)]
struct Row {
    bench: String,
    model: String,
    optimizer: String,
    world: usize,
    hidden: usize,
    depth: usize,
    batch: usize,
    samples_per_s: f64,
    step_ms: f64,
    comm_fraction: f64,
    peak_rss_mib: f64,
    /// samples/s per rank over the 1-rank run's (`None` until both are known).
    #[serde(skip_serializing_if = "Option::is_none")]
    scaling_efficiency: Option<f64>,
}

/// The table (or JSON lines) of the measured world sizes.
fn print_rows(args: &Args, rows: &[Row]) {
    let base = rows.iter().find(|r| r.world == 1).map(|r| r.samples_per_s);
    if !args.json {
        let model = match args.model {
            phalanx_train::ModelKind::Mlp => format!("MLP 784-{}x{}-10", args.hidden, args.depth),
            other => other.to_string(),
        };
        println!(
            "# phalanx bench train: {model}, {}, batch {}/rank, {} steps{}",
            args.optimizer,
            args.batch_size,
            args.steps,
            if args.bf16 { ", bf16 gradients" } else { "" }
        );
        println!(
            "{:>6} {:>12} {:>10} {:>8} {:>11} {:>10}",
            "world", "samples/s", "step(ms)", "comm", "efficiency", "rss(MiB)"
        );
    }
    for r in rows {
        let eff = base.map(|b| r.samples_per_s / (r.world as f64 * b));
        if args.json {
            let row = Row {
                bench: r.bench.clone(),
                model: r.model.clone(),
                optimizer: r.optimizer.clone(),
                scaling_efficiency: eff,
                ..*r
            };
            println!("{}", serde_json::to_string(&row).expect("a row serialises"));
        } else {
            println!(
                "{:>6} {:>12.0} {:>10.2} {:>7.1}% {:>11} {:>10.0}",
                r.world,
                r.samples_per_s,
                r.step_ms,
                100.0 * r.comm_fraction,
                eff.map_or("-".into(), |e| format!("{:.2}", e)),
                r.peak_rss_mib
            );
        }
    }
}

/// Measures this rank's world; rank 0 returns its row.
fn measure(args: &Args) -> anyhow::Result<Option<Row>> {
    crate::cmd::limit_compute_threads();
    let pg = Arc::new(crate::cmd::train_setup::join_group(args.backend)?);
    let t = throughput::measure(
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
        },
    )?;
    Ok((pg.rank() == 0).then(|| Row {
        bench: "train".into(),
        model: args.model.to_string(),
        optimizer: args.optimizer.to_string(),
        world: t.world,
        hidden: args.hidden,
        depth: args.depth,
        batch: args.batch_size,
        samples_per_s: t.samples_per_s,
        step_ms: t.step_ms,
        comm_fraction: t.comm_fraction,
        peak_rss_mib: t.peak_rss_mib,
        scaling_efficiency: None,
    }))
}
