//! `phalanx train`: the seed recipe — an MLP, cross-entropy, SGD — trained data-parallel, and
//! the CNN and transformer next to PyTorch's, with Adam/AdamW, schedules and clipping.
//! Started without a launcher it launches itself on `--nproc-per-node` local processes
//! (default 2), like `torchrun --nproc-per-node 2 train.py`.

use std::{path::PathBuf, process::ExitCode, sync::Arc};

use anyhow::{bail, Context};
use phalanx_pg::BackendType;
use phalanx_train::{
    DeviceSpec, LrSchedule, ModelKind, OptimOptions, OptimizerKind, OuterDType, OuterMode,
    OuterOptions, Sharding, TrainConfig,
};

mod console;
pub(crate) mod setup;
mod stop;

use console::Console;
use setup::{check_backend, check_device, install_failure_hook, join_group};

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
    stop::install(args.checkpoint_dir.is_some());
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
            let code = stop::exit_code(signal);
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

/// `--pp-schedule`'s value.
fn parse_pipeline_schedule(s: &str) -> Result<phalanx_train::PipelineSchedule, String> {
    s.parse()
}
