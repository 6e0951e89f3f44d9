//! `phalanx train`: the seed recipe — an MLP, cross-entropy, SGD — trained data-parallel, and
//! the CNN and transformer next to PyTorch's, with Adam/AdamW, schedules and clipping.
//! Started without a launcher it launches itself on `--nproc-per-node` local processes
//! (default 2), like `torchrun --nproc-per-node 2 train.py`.

use std::{io::IsTerminal, path::PathBuf, process::ExitCode, sync::Arc, time::Instant};

use super::train_setup::{check_backend, check_device, install_failure_hook, join_group};
use anyhow::{bail, Context};
use phalanx_checkpoint::Meta;
use phalanx_pg::BackendType;
use phalanx_train::{
    metrics, metrics::EpochRecord, DeviceSpec, LrSchedule, ModelKind, OptimOptions, OptimizerKind,
    OuterDType, OuterMode, OuterOptions, Reporter, Sharding, Summary, TrainConfig,
};

/// Default number of local processes when none is asked for: the seed recipe's 2.
const DEFAULT_NPROC: u32 = 2;

/// Default tokens a GPT window feeds the model (`--seq-len`).
const DEFAULT_SEQ_LEN: usize = 64;

/// Train the seed MLP (Linear → ReLU → Linear, cross-entropy, SGD) data-parallel. With no flags:
/// 2 local processes on the vendored UCI digits, to ≥ 95% test accuracy in seconds.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    launch: phalanx_launch::LaunchArgs,
    /// digits (the default) | mnist5k | synthetic[:N[:SEED]] | csv:PATH (label last) |
    /// mnist-idx:DIR; for --model gpt a text corpus: shakespeare (the default) | text:PATH.
    // This doc comment is the flag's --help text, printed as written, brackets included.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long)]
    dataset: Option<String>,
    /// Share of the dataset held out for the test accuracy (deterministic split by --seed).
    /// Default 0.2; 0.01 for --model gpt (the validation loss on 50,000 tokens of Shakespeare
    /// takes seconds, not the minute of a fifth of it).
    #[arg(long)]
    test_fraction: Option<f64>,
    /// Passes over the training data (default 60; 1 for --model gpt, whose epoch is 5 MB of
    /// text).
    #[arg(long)]
    epochs: Option<u64>,
    /// Samples per step on each rank (the global batch is this × world size).
    #[arg(long, default_value_t = 8)]
    batch_size: usize,
    /// The model: `mlp` (the seed recipe, sized by --hidden and --depth), `cnn` (two conv
    /// blocks with BatchNorm on 1×28×28), `transformer` (image rows as 28 tokens, 2 encoder
    /// layers), or `gpt` (a decoder language model on byte tokens, sized by --hidden, --depth,
    /// --heads and --seq-len); the image models take --dataset mnist5k or mnist-idx:DIR, the
    /// gpt a text corpus (docs/train.md).
    #[arg(long, default_value = "mlp")]
    model: ModelKind,
    /// The optimizer: `sgd`, `adam` or `adamw` (PyTorch's defaults: betas 0.9/0.999, eps 1e-8).
    /// Default: sgd; adamw for --model gpt.
    #[arg(long)]
    optimizer: Option<OptimizerKind>,
    /// Learning rate (the base rate of the schedule). Default: 0.01; 0.001 for --model gpt.
    #[arg(long)]
    lr: Option<f64>,
    /// Learning-rate schedule: `constant`, `cosine` (to 0 at the last step), `step` (× 0.1 every
    /// 30 epochs) or `step:EPOCHS[:GAMMA]`.
    #[arg(long, default_value = "constant", value_parser = LrSchedule::parse_kind)]
    lr_schedule: phalanx_train::ScheduleKind,
    /// Steps of linear learning-rate warm-up before the schedule.
    #[arg(long, default_value_t = 0)]
    warmup_steps: u64,
    /// SGD momentum (0 = plain SGD, as in the seed recipe).
    #[arg(long, default_value_t = 0.0)]
    momentum: f64,
    /// Weight decay: L2 for sgd and adam, decoupled for adamw (default 0, adamw's 0.01).
    #[arg(long)]
    weight_decay: Option<f32>,
    /// Clip the averaged gradients to this global L2 norm (PyTorch's clip_grad_norm_).
    #[arg(long)]
    grad_clip: Option<f32>,
    /// Freeze the parameters whose path matches: comma-separated path prefixes (`conv1`) or
    /// globs (`encoder.layers.0.*`); a pattern that matches nothing is an error.
    #[arg(long)]
    freeze: Option<String>,
    /// Hidden width (mlp); the width of the residual stream, d_model (gpt).
    #[arg(long, default_value_t = 128)]
    hidden: usize,
    /// Hidden layers (mlp; default 1 = the seed recipe's Linear → ReLU → Linear); blocks
    /// (gpt; default 2).
    #[arg(long)]
    depth: Option<usize>,
    /// Attention heads per block (gpt; default 4); they divide --hidden.
    #[arg(long)]
    heads: Option<usize>,
    /// Tokens the model reads at a time (gpt; default 64): a sample is a window of this many
    /// byte tokens and their next tokens.
    #[arg(long)]
    seq_len: Option<usize>,
    /// Dropout probability (gpt; default 0.1): after the embeddings, on the attention weights
    /// and on each residual branch.
    #[arg(long)]
    dropout: Option<f64>,
    /// Tensor parallelism (gpt): split each block's attention heads and MLP across groups of N
    /// consecutive ranks, in Megatron's layout; the world is N × the data-parallel size, and
    /// --sharding applies on the data-parallel groups (docs/train.md).
    #[arg(long, default_value_t = 1, value_name = "N")]
    tp: usize,
    /// Sequence parallelism under --tp (gpt): between the tensor-parallel regions, each rank
    /// of a group holds its range of the sequence, so the norms, the dropouts and the residual
    /// stream take 1/N of the work and memory; the regions are entered by an all-gather and
    /// left by a reduce-scatter (docs/train.md).
    #[arg(long)]
    sequence_parallel: bool,
    /// Pipeline parallelism (gpt): cut the blocks into N stages on N ranks (the embeddings on
    /// the first, the head on the last), balanced by parameters; microbatches flow through
    /// them as --pp-schedule says. The world is tp × pp × the data-parallel size
    /// (docs/train.md).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pp: usize,
    /// Microbatches per step under --pp (each rank's batch is cut into this many; default 4).
    #[arg(long, value_name = "M")]
    microbatches: Option<usize>,
    /// The pipeline's schedule: `gpipe` (all forwards, then all backwards), `1f1b` (one
    /// forward, one backward: at most --pp microbatches held), `interleaved` (1F1B over
    /// --virtual-stages chunks per rank: a smaller bubble).
    #[arg(long, default_value = "1f1b", value_parser = parse_pipeline_schedule)]
    pp_schedule: phalanx_train::PipelineSchedule,
    /// Chunks of blocks per rank under --pp-schedule interleaved (at least 2).
    #[arg(long, value_name = "V")]
    virtual_stages: Option<usize>,
    /// Where the stages start, as block indices (`--pp-split 3` for 2 stages: blocks 0-2 and
    /// 3 on); default: balanced by parameters.
    #[arg(long, value_delimiter = ',', value_name = "BLOCK,...")]
    pp_split: Option<Vec<usize>>,
    /// Train in islands that meet every --sync-every steps instead of syncing every step:
    /// `diloco` (the pseudo-gradients stepped by Nesterov SGD, --outer-lr and
    /// --outer-momentum), `local-sgd` (the islands' parameters averaged) or `streaming-diloco`
    /// (DiLoCo one fragment at a time, --fragments, --fragment-delay). Inside an island, DDP
    /// as usual; only the outer syncs cross between islands (docs/outer.md).
    #[arg(long)]
    outer: Option<OuterMode>,
    /// Inner steps between outer syncs under --outer (DiLoCo's H, torchft's sync_every).
    #[arg(long, value_name = "H")]
    sync_every: Option<u64>,
    /// The outer learning rate under --outer diloco (default 0.7, the paper's).
    #[arg(long)]
    outer_lr: Option<f32>,
    /// The outer Nesterov momentum under --outer diloco (default 0.9, the paper's).
    #[arg(long)]
    outer_momentum: Option<f32>,
    /// The pseudo-gradients' dtype between islands: `f32`, `bf16`, `int8` or `fp4` (blocks
    /// with their scales; docs/outer.md bounds the error). Default f32.
    #[arg(long)]
    outer_dtype: Option<OuterDType>,
    /// Ranks per island under --outer, consecutive ranks (default: the ranks of one host).
    #[arg(long, value_name = "N")]
    island_size: Option<usize>,
    /// Under --outer streaming-diloco: the fragments the model is cut into, one synced every
    /// H/F steps, each once every H steps (default 4).
    #[arg(long, value_name = "F")]
    fragments: Option<usize>,
    /// Under --outer streaming-diloco: inner steps a fragment's sync overlaps, below H/F
    /// (the paper's tau, torchft's fragment_sync_delay; default 0).
    #[arg(long, value_name = "T")]
    fragment_delay: Option<u64>,
    /// Under --outer streaming-diloco: the share of the island's own progress a synced
    /// fragment keeps, 0 to 1 (the paper's alpha, torchft's fragment_update_alpha; default
    /// 0.5 with --fragment-delay, as the paper found best, else 0).
    #[arg(long, value_name = "ALPHA")]
    fragment_alpha: Option<f32>,
    /// Seed of the initialisation, the split and the sampler's shuffle.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Reduce gradients in bf16 (half the bytes on the wire; PyTorch's bf16_compress_hook).
    #[arg(long)]
    bf16: bool,
    /// What each rank keeps whole and what only its shard of: `none` (DDP: everything whole),
    /// `optimizer` (ZeRO-1, PyTorch's ZeroRedundancyOptimizer: the optimizer state sharded),
    /// `grad` (ZeRO-2, FSDP's SHARD_GRAD_OP: gradients too), `full` (ZeRO-3, FSDP's FULL_SHARD:
    /// parameters too), `hybrid` (HSDP, FSDP's HYBRID_SHARD: full within a host, replicated
    /// across hosts). Results are bitwise DDP's (hybrid's within rounding); checkpoints are
    /// written by every rank and load at any world size and under any mode (docs/sharding.md).
    #[arg(long, default_value = "none")]
    sharding: Sharding,
    /// Under `--sharding full`: whether each block frees its gathered parameters after its
    /// forward and gathers them again (recomputing its forward) for its backward (`true`, the
    /// least memory), or keeps them until its backward (`false`, no recomputation): FSDP2's
    /// `reshard_after_forward`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    reshard_after_forward: bool,
    /// Under `--sharding hybrid`: ranks per shard group (consecutive ranks; the groups are
    /// each other's replicas). Default: the ranks of one host (HSDP's 2-D mesh: shard within
    /// a host, replicate across hosts).
    #[arg(long, value_name = "N")]
    shard_group_size: Option<usize>,
    /// Where gradient buckets live: `auto` (on the GPU with `--device cuda`: NCCL averages them
    /// in place, other backends through page-locked host memory; on the host on a CPU),
    /// `host`, or `device`.
    #[arg(long, default_value = "auto")]
    bucket_memory: phalanx_train::BucketMemory,
    /// Process-group backend: `native` (TCP, shared memory), `mpi` (the MPI library's
    /// collectives; run under `mpirun -np N`; needs a build with the `mpi` feature), or `nccl`
    /// (one GPU per rank; needs the `nccl` feature and NCCL; docs/gpu.md).
    #[arg(long, default_value = "native", env = "PHALANX_BACKEND")]
    backend: BackendType,
    /// Training device: `cpu`, `cuda` (GPU LOCAL_RANK, as torchrun users expect) or `cuda:N`.
    /// CUDA needs a build with the `cuda` feature (docs/gpu.md); with `--backend nccl` gradient
    /// buckets stay on the GPU, with any other backend they are reduced on the host (through
    /// page-locked memory), so ranks may share one GPU.
    #[arg(long, default_value = "cpu")]
    device: DeviceSpec,
    /// Save a checkpoint (safetensors + JSON) here at every epoch end (rank 0 writes).
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Also save every N steps (0: only at epoch ends).
    #[arg(long, default_value_t = 0)]
    checkpoint_every: u64,
    /// Continue from the newest checkpoint in --checkpoint-dir (mid-epoch, any world size).
    #[arg(long)]
    resume: bool,
    /// Stop after N steps in total (for benchmarks and tests).
    #[arg(long)]
    max_steps: Option<u64>,
    /// One JSON object per epoch (rank 0) and a final one per rank, instead of text.
    #[arg(long)]
    json: bool,
    /// Write metrics.jsonl and the loss/accuracy plot (curves.png, curves.svg) here (rank 0).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub(crate) fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    if let Some(c) = args.grad_clip {
        if !(c.is_finite() && c > 0.0) {
            bail!("--grad-clip {c}: expected a positive global norm, e.g. --grad-clip 1.0");
        }
    }
    if args.model != ModelKind::Gpt {
        for (flag, given) in [
            ("--heads", args.heads.is_some()),
            ("--seq-len", args.seq_len.is_some()),
            ("--dropout", args.dropout.is_some()),
        ] {
            if given {
                bail!(
                    "{flag} sizes the language model: it applies to --model gpt, not --model {}",
                    args.model
                );
            }
        }
    }
    if args.tp == 0 {
        bail!("--tp 0: expected the ranks of each tensor-parallel group, at least 1");
    }
    phalanx_train::check_tensor_parallel_model(args.model, args.tp)?;
    if args.sequence_parallel {
        phalanx_train::check_sequence_parallel(args.tp, args.seq_len.unwrap_or(DEFAULT_SEQ_LEN))?;
    }
    if args.pp == 0 {
        bail!("--pp 0: expected the stages of each pipeline, at least 1");
    }
    if args.pp > 1 && args.model != ModelKind::Gpt {
        bail!(
            "--pp {} cuts a GPT's blocks into pipeline stages; --model {} has none: use \
             --model gpt",
            args.pp,
            args.model
        );
    }
    if args.pp == 1 {
        for (flag, given) in [
            ("--microbatches", args.microbatches.is_some()),
            ("--virtual-stages", args.virtual_stages.is_some()),
            ("--pp-split", args.pp_split.is_some()),
        ] {
            if given {
                bail!("{flag} shapes a pipeline: it needs --pp 2 or more");
            }
        }
    }
    if args.microbatches == Some(0) {
        bail!("--microbatches 0: expected at least 1");
    }
    if let Some(p) = args.dropout {
        if !(0.0..1.0).contains(&p) {
            bail!("--dropout {p}: expected a probability in [0, 1)");
        }
    }
    let outer = outer_options(&args)?;
    check_backend(args.backend)?;
    check_device(args.device)?;
    if args.backend != BackendType::Mpi && !phalanx_launch::started_by_launcher() {
        let explicit = std::env::args().any(|a| a.starts_with("--nproc-per-node"))
            || std::env::var_os("PET_NPROC_PER_NODE").is_some();
        if !explicit {
            args.launch.nproc_per_node = DEFAULT_NPROC;
        }
        if args.resume && args.checkpoint_dir.is_none() {
            bail!("--resume needs --checkpoint-dir");
        }
        if args.json {
            // Plain JSON lines (`phalanx train --json | jq .`): each carries its rank already.
            args.launch
                .log_line_prefix_template
                .get_or_insert_with(String::new);
        }
        return phalanx_launch::relaunch_self(&args.launch);
    }
    super::limit_compute_threads();
    // A worker, not an agent: SIGUSR1/SIGTERM stop it at a step boundary with a checkpoint.
    super::train_stop::install(args.checkpoint_dir.is_some());
    // Before joining: a missing GPU fails this rank at once instead of after the rendezvous.
    let local_rank = phalanx_pg::DistEnv::from_env()
        .map(|e| e.local_rank)
        .unwrap_or(0);
    phalanx_train::set_device(args.device, local_rank).with_context(|| {
        format!(
            "rank with LOCAL_RANK {local_rank}: --device {}",
            args.device
        )
    })?;
    // `phalanx launch --fault-tolerance`: the group of this worker's generation, re-formed by
    // the trainer when a rank dies (Note [FT generations]).
    let ft = phalanx_pg::FaultTolerance::from_env()?;
    if ft.is_some() && args.backend != BackendType::Native {
        bail!(
            "--backend {}: fault tolerance (phalanx launch --fault-tolerance) re-forms the \
             native backend's group only; use --backend native",
            args.backend
        );
    }
    // Under fault tolerance the trainer joins (a replacement only once its model is built).
    let pg = match &ft {
        Some(_) => None,
        None => {
            let pg = Arc::new(join_group(args.backend)?);
            install_failure_hook(&pg);
            Some(pg)
        }
    };
    let (rank, world) = match (&ft, &pg) {
        (Some(ft), _) => (ft.slot(), ft.slots()),
        (None, Some(pg)) => (pg.rank(), pg.world_size()),
        (None, None) => unreachable!("joined or fault tolerant"),
    };
    let banner = rank == 0 && !args.json && !ft.as_ref().is_some_and(|f| f.is_replacement());
    let gpt = args.model == ModelKind::Gpt;
    let dataset = args
        .dataset
        .clone()
        .unwrap_or_else(|| if gpt { "shakespeare" } else { "digits" }.into());
    let epochs = args.epochs.unwrap_or(if gpt { 1 } else { 60 });
    let depth = args.depth.unwrap_or(if gpt { 2 } else { 1 });
    let optimizer = args.optimizer.unwrap_or(if gpt {
        OptimizerKind::AdamW
    } else {
        OptimizerKind::Sgd
    });
    let lr = args.lr.unwrap_or(if gpt { 1e-3 } else { 0.01 });
    let cfg = TrainConfig {
        dataset: dataset.clone(),
        test_fraction: args.test_fraction.unwrap_or(if gpt { 0.01 } else { 0.2 }),
        epochs,
        batch_size: args.batch_size,
        model: args.model,
        optim: OptimOptions {
            kind: optimizer,
            lr,
            momentum: args.momentum,
            weight_decay: args
                .weight_decay
                .unwrap_or(optimizer.default_weight_decay()),
            schedule: LrSchedule {
                kind: args.lr_schedule,
                warmup_steps: args.warmup_steps,
            },
        },
        grad_clip: args.grad_clip,
        freeze: args.freeze.clone(),
        hidden: args.hidden,
        depth,
        heads: args.heads.unwrap_or(4),
        seq_len: args.seq_len.unwrap_or(DEFAULT_SEQ_LEN),
        dropout: args.dropout.unwrap_or(0.1),
        tp: args.tp,
        sequence_parallel: args.sequence_parallel,
        pp: phalanx_train::PipelineOptions {
            stages: args.pp,
            microbatches: args.microbatches.unwrap_or(4),
            schedule: args.pp_schedule,
            virtual_stages: args.virtual_stages.unwrap_or(match args.pp_schedule {
                phalanx_train::PipelineSchedule::Interleaved => 2,
                _ => 1,
            }),
            split: args.pp_split.clone(),
        },
        seed: args.seed,
        bf16: args.bf16,
        bucket_memory: args.bucket_memory,
        sharding: args.sharding,
        reshard_after_forward: args.reshard_after_forward,
        shard_group_size: args.shard_group_size,
        checkpoint_dir: args.checkpoint_dir.clone(),
        checkpoint_every: args.checkpoint_every,
        resume: args.resume,
        max_steps: args.max_steps,
        outer,
    };
    let mut reporter = Console::new(
        rank,
        world,
        args.json,
        epochs,
        args.batch_size,
        gpt.then_some(cfg.seq_len),
    );
    if banner {
        let model = match args.model {
            ModelKind::Mlp => format!("MLP with {depth} hidden layer(s) of {}", args.hidden),
            ModelKind::Gpt => format!(
                "GPT with {depth} block(s), d_model {}, {} heads, {} tokens of context, {} \
                 parameters",
                cfg.hidden,
                cfg.heads,
                cfg.seq_len,
                phalanx_train::GptConfig {
                    vocab: phalanx_data::BYTE_VOCAB,
                    seq_len: cfg.seq_len,
                    d_model: cfg.hidden,
                    depth,
                    heads: cfg.heads,
                    dropout: cfg.dropout,
                }
                .num_params()
            ),
            other => other.to_string(),
        };
        let sharding = match args.sharding {
            Sharding::None => String::new(),
            s => format!(", --sharding {s}"),
        };
        // Islands of one host by default: one host alone is one island (the outer optimizer
        // then steps alone), which the line says.
        let outer = cfg.outer.as_ref().map_or(String::new(), |o| {
            let local = pg.as_ref().map_or(world, |pg| pg.local_world_size());
            let size = o.island_size.unwrap_or(local).max(1);
            let fragments = match o.fragments {
                1 => String::new(),
                f => format!(" in {f} fragments"),
            };
            format!(
                ", --outer {} every {} steps{fragments}: {} island(s) of {size} rank(s)",
                o.mode,
                o.sync_every,
                world / size
            )
        });
        println!(
            "phalanx train: {} on {} rank(s), {model}, batch {}/rank, {} lr {}{}{sharding}{outer}",
            dataset,
            world,
            args.batch_size,
            optimizer,
            lr,
            if args.bf16 { ", bf16 gradients" } else { "" }
        );
    }
    // On the CPU the step runs on the compute pool (Note [Step on the compute pool]); a GPU's
    // kernels are not rayon's, and its context stays with the thread that opened it. Not under
    // fault tolerance: its recovery computes on other threads while the step's thread waits
    // for them, and with one pool thread per rank (4 ranks on 2 cores) that thread is the
    // whole pool, so their tensor operations would wait for it in turn (a hybrid-sharding
    // regroup hung so in `train_sharding`).
    let result = match (ft, &pg) {
        (Some(ft), _) => phalanx_train::train_fault_tolerant(ft, &cfg, &mut reporter),
        (None, Some(pg)) => {
            let mut run = || phalanx_train::train(pg.clone(), &cfg, &mut reporter).map(Some);
            match args.device {
                DeviceSpec::Cpu => phalanx_train::on_compute_pool(run),
                DeviceSpec::Cuda(_) => run(),
            }
        }
        (None, None) => unreachable!("joined or fault tolerant"),
    };
    let summary = match result {
        Ok(Some(s)) => s,
        Ok(None) => {
            eprintln!(
                "rank {rank}: the run finished before this worker could join it; nothing to do"
            );
            return Ok(ExitCode::SUCCESS);
        }
        // Not a failure: the group is whole, nobody is aborted (Note [Stop agreement]).
        Err(phalanx_train::Error::Stopped {
            signal,
            global_step,
            checkpoint,
        }) => {
            let code = super::train_stop::exit_code(signal);
            if rank == 0 {
                let saved = match &checkpoint {
                    Some(p) => format!(
                        "checkpoint {} committed; --resume continues from it",
                        p.display()
                    ),
                    None => "no --checkpoint-dir: nothing saved".into(),
                };
                eprintln!(
                    "phalanx train: received {}: all ranks stopped after step {global_step}; \
                     {saved}; exiting with {code}",
                    phalanx_launch::signal_name(signal)
                );
            }
            return Ok(ExitCode::from(code));
        }
        Err(e) => {
            let msg = format!("rank {rank} failed: {e}");
            if let Some(pg) = &pg {
                pg.abort(&msg);
            }
            if matches!(
                e,
                phalanx_train::Error::Pg(phalanx_pg::Error::Regroup { .. })
            ) {
                // Its agent must not replace it: nothing would join (Note [FT generations]).
                eprintln!("{msg}");
                return Ok(ExitCode::from(phalanx_core::EXIT_NO_REGROUP));
            }
            bail!(msg);
        }
    };
    reporter.finish(&summary, args.out.as_deref())?;
    Ok(ExitCode::SUCCESS)
}

/// Renders progress: rank 0 prints, others stay quiet (their failures speak for them).
struct Console {
    rank: usize,
    world: usize,
    json: bool,
    epochs: u64,
    bar: Option<indicatif::ProgressBar>,
    /// The launcher draws the bar from our progress records (PHALANX_PROGRESS=1).
    records_to_launcher: bool,
    samples_per_step: usize,
    last_line: Instant,
    last_step: u64,
    started: Instant,
    records: Vec<EpochRecord>,
    /// A language model's tokens per sample (its --seq-len): its test loss is a validation
    /// loss, reported with its perplexity, and its rate in tokens.
    language_model: Option<usize>,
}

impl Console {
    /// `exp(loss)` for a language model.
    fn perplexity(&self, loss: f64) -> Option<f64> {
        self.language_model.map(|_| loss.exp())
    }

    fn tokens_per_sample(&self) -> f64 {
        self.language_model.unwrap_or(1) as f64
    }

    fn new(
        rank: usize,
        world: usize,
        json: bool,
        epochs: u64,
        batch_size: usize,
        language_model: Option<usize>,
    ) -> Console {
        let bar = (rank == 0 && !json && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(0);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "epoch {prefix} [{bar:30}] {pos}/{len} steps  {msg}  ETA {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            b
        });
        let records_to_launcher = bar.is_none()
            && rank == 0
            && !json
            && std::env::var("PHALANX_PROGRESS").is_ok_and(|v| v == "1");
        Console {
            rank,
            world,
            json,
            epochs,
            bar,
            records_to_launcher,
            samples_per_step: batch_size * world,
            last_line: Instant::now(),
            last_step: 0,
            started: Instant::now(),
            records: Vec::new(),
            language_model,
        }
    }

    fn finish(&mut self, s: &Summary, out: Option<&std::path::Path>) -> anyhow::Result<()> {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        if self.json {
            // Serialized, not formatted: a non-finite figure becomes `null`, never invalid JSON.
            print_json(&SummaryLine {
                event: "summary",
                rank: s.rank,
                world: s.world,
                epochs: s.epochs,
                train_loss: s.train_loss,
                test_accuracy: s.test_accuracy,
                test_loss: s.test_loss,
                perplexity: self.perplexity(s.test_loss),
                samples_per_s: s.samples_per_s,
                comm_fraction: s.comm_fraction,
                param_digest: &s.param_digest,
                pipeline_bubble: s.pipeline_bubble.map(|b| b.measured),
                pipeline_bubble_theory: s.pipeline_bubble.map(|b| b.theory),
                pipeline_imbalance: s.pipeline_bubble.map(|b| b.imbalance),
                pipeline_idle: s.pipeline_bubble.map(|b| b.idle),
                outer_syncs: s.outer.map(|o| o.syncs),
                outer_bytes_across: s.outer.map(|o| o.bytes_across),
            });
        } else if self.rank == 0 && self.language_model.is_some() {
            println!(
                "done: {} epoch(s) in {:.1} s, train loss {:.4}, val loss {:.4}, perplexity {:.2}, {:.0} tokens/s on {} rank(s), {:.0}% of step time in communication, parameters {}",
                s.epochs,
                self.started.elapsed().as_secs_f64(),
                s.train_loss,
                s.test_loss,
                s.test_loss.exp(),
                s.samples_per_s * self.tokens_per_sample(),
                s.world,
                100.0 * s.comm_fraction,
                &s.param_digest[..16]
            );
        } else if self.rank == 0 {
            println!(
                "done: {} epochs in {:.1} s, test accuracy {:.2}%, {:.0} samples/s on {} rank(s), {:.0}% of step time in communication, parameters {}",
                s.epochs,
                self.started.elapsed().as_secs_f64(),
                100.0 * s.test_accuracy,
                s.samples_per_s,
                s.world,
                100.0 * s.comm_fraction,
                &s.param_digest[..16]
            );
        }
        if let (Some(dir), 0) = (out, self.rank) {
            metrics::write_jsonl(dir, &s.records)?;
            metrics::plot(dir, &s.records)?;
            if !self.json {
                println!(
                    "wrote {}/metrics.jsonl, curves.png, curves.svg",
                    dir.display()
                );
            }
        }
        Ok(())
    }
}

impl Reporter for Console {
    fn step(&mut self, epoch: u64, step: u64, steps: u64, loss: f32) {
        if self.rank != 0 || self.json {
            return;
        }
        if let Some(b) = &self.bar {
            b.set_length(steps);
            b.set_position(step);
            b.set_prefix(format!("{}/{}", epoch + 1, self.epochs));
            b.set_message(format!("loss {loss:.4}"));
        } else if self.records_to_launcher {
            let dt = self.last_line.elapsed().as_secs_f64();
            if dt > 0.1 || step == steps {
                self.last_line = Instant::now();
                let rate = self.samples_per_step as f64
                    * (if step >= self.last_step {
                        step - self.last_step
                    } else {
                        step
                    }) as f64
                    / dt.max(1e-9);
                self.last_step = step;
                println!(
                    "{}{step} {steps} epoch {}/{}\tloss {loss:.4} {rate:.0} samples/s",
                    String::from_utf8_lossy(phalanx_launch::progress::MARKER),
                    epoch + 1,
                    self.epochs
                );
            }
        } else if self.last_line.elapsed().as_secs_f64() > 5.0 {
            // Through a launcher the output is a pipe: a line every few seconds instead of a bar.
            self.last_line = Instant::now();
            println!(
                "epoch {}/{} step {step}/{steps} loss {loss:.4}",
                epoch + 1,
                self.epochs
            );
        }
    }

    fn epoch(&mut self, r: &EpochRecord) {
        self.records.push(r.clone());
        if self.rank != 0 {
            return;
        }
        if self.json {
            print_json(&EpochLine {
                event: "epoch",
                epoch: r.epoch,
                world: self.world,
                train_loss: r.train_loss,
                test_accuracy: r.test_accuracy,
                test_loss: r.test_loss,
                perplexity: self.perplexity(r.test_loss),
                samples_per_s: r.samples_per_s,
                comm_fraction: r.comm_fraction,
                seconds: r.seconds,
            });
            return;
        }
        let line = if self.language_model.is_some() {
            format!(
                "epoch {:>3}/{}  loss {:.4}  val loss {:.4}  perplexity {:7.2}  next-token acc {:6.2}%  {:>8.0} tokens/s  comm {:4.1}%  ({:.2} s)",
                r.epoch,
                self.epochs,
                r.train_loss,
                r.test_loss,
                r.test_loss.exp(),
                100.0 * r.test_accuracy,
                r.samples_per_s * self.tokens_per_sample(),
                100.0 * r.comm_fraction,
                r.seconds
            )
        } else {
            format!(
            "epoch {:>3}/{}  loss {:.4}  test acc {:6.2}%  {:>8.0} samples/s  comm {:4.1}%  ({:.2} s)",
            r.epoch,
            self.epochs,
            r.train_loss,
            100.0 * r.test_accuracy,
            r.samples_per_s,
            100.0 * r.comm_fraction,
            r.seconds
        )
        };
        match &self.bar {
            Some(b) => b.println(line),
            None => println!("{line}"),
        }
    }

    fn checkpoint(&mut self, path: &std::path::Path) {
        tracing::info!(path = %path.display(), "checkpoint saved");
    }

    fn checkpoint_skipped(&mut self, d: &phalanx_checkpoint::Damaged) {
        eprintln!(
            "phalanx train: warning: skipping a damaged checkpoint (resuming from an older one): {}",
            d.error
        );
    }

    fn nothing_to_resume(&mut self, dir: &std::path::Path) {
        eprintln!(
            "phalanx train: --resume: no checkpoint in {}; starting from the beginning",
            dir.display()
        );
    }

    fn regrouped(&mut self, r: &phalanx_train::Regrouped) {
        // Every rank says it on stderr (a survivor's view and the replacement's); rank 0 also
        // in the run's own output.
        eprintln!(
            "phalanx train: rank {}: generation {}: process group re-formed with ranks {:?} of \
             {}, step {} completed {:.2} s after {} (state from rank {})",
            self.rank,
            r.generation,
            r.members,
            // The slots the round has had: its first world, and any admitted node's after it.
            r.members
                .iter()
                .map(|&m| m + 1)
                .max()
                .unwrap_or(0)
                .max(self.world),
            r.position.global_step,
            r.seconds,
            if r.replacement {
                "this replacement joined"
            } else {
                "the change"
            },
            r.members.get(r.source).copied().unwrap_or(r.source)
        );
        if self.rank == 0 && self.json {
            print_json(&RegroupedLine {
                event: "regrouped",
                generation: r.generation,
                ranks: r.members.len(),
                source: r.members.get(r.source).copied().unwrap_or(r.source),
                global_step: r.position.global_step,
                seconds: r.seconds,
            });
        }
    }

    fn resumed(&mut self, m: &Meta) {
        if self.json && self.rank == 0 {
            print_json(&ResumedLine {
                event: "resumed",
                global_step: m.global_step,
                epoch: m.epoch + 1,
                step_in_epoch: m.step_in_epoch,
            });
        }
        if !self.json {
            // The ranks that wrote it: a cut model's pieces come from every rank of the world,
            // while `world_size` counts the data-parallel ranks the position is sharded over.
            let writers = m
                .sharded
                .as_ref()
                .map_or(m.world_size, |s| s.shards.len() as u64);
            println!(
                "resumed from step {} (epoch {}, step {} of it), saved by {writers} rank(s)",
                m.global_step,
                m.epoch + 1,
                m.step_in_epoch,
            );
        }
    }
}

/// The outer sync's options from `--outer` and its flags, or the sentence for a flag that
/// cannot apply (the checks that need the world, such as the island size dividing it, are the
/// ranks': `OuterOptions::check`).
fn outer_options(args: &Args) -> anyhow::Result<Option<OuterOptions>> {
    let Some(mode) = args.outer else {
        for (flag, given) in [
            ("--sync-every", args.sync_every.is_some()),
            ("--outer-lr", args.outer_lr.is_some()),
            ("--outer-momentum", args.outer_momentum.is_some()),
            ("--outer-dtype", args.outer_dtype.is_some()),
            ("--island-size", args.island_size.is_some()),
            ("--fragments", args.fragments.is_some()),
            ("--fragment-delay", args.fragment_delay.is_some()),
            ("--fragment-alpha", args.fragment_alpha.is_some()),
        ] {
            if given {
                bail!("{flag} shapes the outer sync between islands: it needs --outer diloco, local-sgd or streaming-diloco");
            }
        }
        return Ok(None);
    };
    let Some(sync_every) = args.sync_every else {
        bail!("--outer {mode} needs --sync-every H, the inner steps between outer syncs (DiLoCo's paper uses 500, torchft's examples 20 to 100)");
    };
    let options = match mode {
        OuterMode::DiLoCo => OuterOptions::diloco(sync_every),
        OuterMode::StreamingDiLoCo => {
            OuterOptions::streaming_diloco(sync_every, args.fragments.unwrap_or(4))
        }
        OuterMode::LocalSgd => {
            for (flag, given) in [
                ("--outer-lr", args.outer_lr.is_some()),
                ("--outer-momentum", args.outer_momentum.is_some()),
            ] {
                if given {
                    bail!("{flag} applies to --outer diloco: --outer local-sgd averages the islands' parameters, with no outer optimizer");
                }
            }
            OuterOptions::local_sgd(sync_every)
        }
    };
    let (lr, momentum) = (options.lr, options.momentum);
    // Fragment flags on another mode are kept, for the check below to name them.
    let (fragments, delay, alpha) = (
        options.fragments,
        options.fragment_delay,
        options.fragment_alpha,
    );
    let options = OuterOptions {
        fragments: args.fragments.unwrap_or(fragments),
        ..options
    }
    .with_fragment_delay(
        args.fragment_delay.unwrap_or(delay),
        args.fragment_alpha.unwrap_or(match args.fragment_delay {
            // With overlap, dropping the steps a sync overlapped costs accuracy: the CNN of
            // docs/outer.md at H 100 in 4 fragments with a delay of 5 ends at 96.6% keeping
            // none of them and at 97.4% keeping half (DDP: 97.4%).
            Some(d) if d > 0 => 0.5,
            _ => alpha,
        }),
    );
    let options = options
        .with_outer_optimizer(
            args.outer_lr.unwrap_or(lr),
            args.outer_momentum.unwrap_or(momentum),
        )
        .with_dtype(args.outer_dtype.unwrap_or_default())
        .with_island_size(args.island_size);
    if args.island_size == Some(0) {
        bail!("--island-size 0: expected the ranks of each island, at least 1");
    }
    // The checks that need no group (--sync-every 0, the outer optimizer's numbers), before
    // any process starts.
    if let Err(e) = options.check_alone() {
        bail!("{e}");
    }
    Ok(Some(options))
}

/// `--json`'s line at the end of a run, one per rank (fields in this order).
#[derive(serde::Serialize)]
struct SummaryLine<'a> {
    event: &'static str,
    rank: usize,
    world: usize,
    epochs: u64,
    /// The last epoch's mean loss, or that of the steps run of it under --max-steps.
    train_loss: f64,
    test_accuracy: f64,
    test_loss: f64,
    /// A language model's: `exp(test_loss)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    perplexity: Option<f64>,
    samples_per_s: f64,
    comm_fraction: f64,
    param_digest: &'a str,
    /// Under `--pp`: the share of its steps the busiest stage did not compute, measured (Note
    /// [The measured bubble] in phalanx-train).
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_bubble: Option<f64>,
    /// Under `--pp`: the schedule's bubble in theory, `(p − 1) / (v·m + p − 1)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_bubble_theory: Option<f64>,
    /// Under `--pp`: how much less the lightest stage computed than the busiest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_imbalance: Option<f64>,
    /// Under `--pp`: the share of its steps this rank did not compute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_idle: Option<f64>,
    /// Under `--outer`: the outer syncs run.
    #[serde(skip_serializing_if = "Option::is_none")]
    outer_syncs: Option<u64>,
    /// Under `--outer`: the bytes this rank sent across islands in them.
    #[serde(skip_serializing_if = "Option::is_none")]
    outer_bytes_across: Option<u64>,
}

/// `--json`'s line after a regroup (rank 0): fault tolerance recovered from a dead rank.
#[derive(serde::Serialize)]
struct RegroupedLine {
    event: &'static str,
    generation: u64,
    ranks: usize,
    source: usize,
    global_step: u64,
    seconds: f64,
}

/// `--json`'s line when training resumed from a checkpoint (rank 0).
#[derive(serde::Serialize)]
struct ResumedLine {
    event: &'static str,
    global_step: u64,
    epoch: u64,
    step_in_epoch: u64,
}

/// `--json`'s line per epoch (rank 0).
#[derive(serde::Serialize)]
struct EpochLine {
    event: &'static str,
    epoch: u64,
    world: usize,
    train_loss: f64,
    test_accuracy: f64,
    test_loss: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    perplexity: Option<f64>,
    samples_per_s: f64,
    comm_fraction: f64,
    seconds: f64,
}

fn print_json(line: &impl serde::Serialize) {
    match serde_json::to_string(line) {
        Ok(text) => println!("{text}"),
        Err(e) => tracing::error!("--json: {e}"),
    }
}

/// `--pp-schedule`'s value.
fn parse_pipeline_schedule(s: &str) -> Result<phalanx_train::PipelineSchedule, String> {
    s.parse()
}
