//! Between the training loop and checkpoint files: which facts a checkpoint must match, and
//! the model's parameters in PyTorch's layout (see Note [Checkpoint commit] in `checkpoint`).

use std::collections::HashMap;

use phalanx_checkpoint::position::Position;
use phalanx_checkpoint::sharded::{Sharded, Strided};
use phalanx_checkpoint::{self as checkpoint, sharded, state_dict, Checkpoint, Meta};
use phalanx_core::trace;
use phalanx_data::Dataset;
use phalanx_ddp::{adapter::burn::params_to_flat, DataParallel};
use phalanx_pg::ProcessGroup;

use crate::{
    config::{Reporter, TrainConfig},
    model_parallel::{self, ModelParallel},
    parallel, Classifier, Error, Optim, Result,
};

/// Facts a checkpoint must agree with to be resumed.
pub(crate) fn run_facts(cfg: &TrainConfig, data: &Dataset) -> HashMap<String, String> {
    let mut facts = HashMap::from([
        ("dataset".into(), cfg.dataset.clone()),
        ("dataset_len".into(), data.len().to_string()),
        ("test_fraction".into(), cfg.test_fraction.to_string()),
        ("model".into(), cfg.model.to_string()),
        ("optimizer".into(), cfg.optim.kind.to_string()),
        ("hidden".into(), cfg.hidden.to_string()),
        ("depth".into(), cfg.depth.to_string()),
        ("lr".into(), cfg.optim.lr.to_string()),
        ("lr_schedule".into(), format!("{:?}", cfg.optim.schedule)),
        ("momentum".into(), cfg.optim.momentum.to_string()),
        ("weight_decay".into(), cfg.optim.weight_decay.to_string()),
        ("grad_clip".into(), format!("{:?}", cfg.grad_clip)),
        ("freeze".into(), cfg.freeze.clone().unwrap_or_default()),
        ("bf16".into(), cfg.bf16.to_string()),
    ]);
    // Only the GPT has heads and windows (an MLP's checkpoint does not depend on them).
    if cfg.model.reads_text() {
        facts.insert("heads".into(), cfg.heads.to_string());
        facts.insert("seq_len".into(), cfg.seq_len.to_string());
        facts.insert("dropout".into(), cfg.dropout.to_string());
    }
    facts
}

pub(crate) fn check_compatible(
    meta: &Meta,
    facts: &HashMap<String, String>,
    cfg: &TrainConfig,
) -> Result<()> {
    // The model and the optimizer first: with those different, nothing else is comparable.
    let mut keys: Vec<&String> = facts.keys().collect();
    keys.sort_by_key(|k| (!matches!(k.as_str(), "model" | "optimizer"), k.as_str()));
    for k in keys {
        let v = &facts[k];
        // Checkpoints from before --model and --optimizer hold the seed MLP and SGD.
        let old = meta.config.get(k).cloned().or_else(|| match k.as_str() {
            "model" => Some("mlp".into()),
            "optimizer" => Some("sgd".into()),
            _ => None,
        });
        if let Some(old) = old {
            if &old != v {
                return Err(Error::Config(format!(
                    "--resume: the checkpoint was trained with {k}={old}, this run has {k}={v}"
                )));
            }
        }
    }
    if meta.seed != cfg.seed || meta.batch_size != cfg.batch_size as u64 {
        return Err(Error::Config(format!(
            "--resume: the checkpoint used --seed {} --batch-size {}, this run --seed {} --batch-size {}",
            meta.seed, meta.batch_size, cfg.seed, cfg.batch_size
        )));
    }
    Ok(())
}

/// Writes a checkpoint of the run at `at`: whole, by rank 0, under DDP; sharded, by every
/// rank, under a sharded mode (Note [Sharded checkpoints]; a collective then); by every rank
/// of the world, each its pieces, for a model cut across ranks (`mp`; Note [Pieces of a cut
/// model]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn save<M: Classifier, E: DataParallel<M>>(
    pg: &ProcessGroup,
    mp: Option<&ModelParallel>,
    cfg: &TrainConfig,
    engine: &E,
    optim: &Optim,
    facts: &HashMap<String, String>,
    at: Position,
    reporter: &mut dyn Reporter,
) -> Result<()> {
    let Some(dir) = cfg.checkpoint_dir.as_ref() else {
        return Ok(());
    };
    let meta = |sharded| Meta {
        format: String::new(),
        epoch: at.epoch,
        step_in_epoch: at.step_in_epoch,
        global_step: at.global_step,
        samples_in_epoch: at.samples_in_epoch,
        seed: cfg.seed,
        // The world whose sampler shards the position counts.
        world_size: at.world,
        batch_size: cfg.batch_size as u64,
        config: facts.clone(),
        tensors_sha256: String::new(),
        tensors_file: String::new(),
        sharded,
        linear_only: true,
    };
    if let Some(mp) = mp {
        let (shard, placed) = match parallel::shard(engine, optim)? {
            // The engine shards the piece over the data-parallel group.
            Some((shard, layout)) => {
                let dp_rank = engine.process_group().rank();
                mp.pieces().of_shard(shard, &layout, dp_rank)?
            }
            // The engine keeps its module (this rank's piece) whole.
            None => {
                let values = params_to_flat(engine.module())?;
                let state = optim
                    .state_bytes()
                    .map_err(|e| Error::Config(format!("saving the optimizer state: {e}")))?;
                mp.pieces().shard(values, state)?
            }
        };
        let world = mp.world();
        let record = serde_json::to_vec(&placed).expect("blocks serialise");
        let placed = phalanx_pg::all_gather_object(world, &record)?
            .iter()
            .map(|r| serde_json::from_slice(r))
            .collect::<std::result::Result<Vec<Vec<(usize, Strided)>>, _>>()
            .map_err(|e| Error::Config(format!("a rank's checkpoint layout: {e}")))?;
        let layout = Sharded {
            sharding: format!("{} {}", cfg.sharding, model_parallel::flags(cfg)),
            shards: Vec::new(),
            tensors: mp.pieces().layout(&placed),
        };
        let _s = trace::span("checkpoint", "io");
        let written = sharded::save(
            world,
            dir,
            meta(Some(layout)),
            shard,
            checkpoint::DEFAULT_KEEP,
        )?;
        if let Some(path) = written {
            reporter.checkpoint(&path);
        }
        return Ok(());
    }
    if let Some((shard, layout)) = parallel::shard(engine, optim)? {
        let _s = trace::span("checkpoint", "io");
        let written = sharded::save(pg, dir, meta(Some(layout)), shard, checkpoint::DEFAULT_KEEP)?;
        if let Some(path) = written {
            reporter.checkpoint(&path);
        }
        return Ok(());
    }
    if pg.rank() != 0 {
        return Ok(());
    }
    let _s = trace::span("checkpoint", "io");
    // The engine keeps the parameters whole: its module is the whole model.
    let tensors = state_dict::module_tensors(engine.module())?;
    let mut ck = Checkpoint {
        meta: meta(None),
        tensors,
        optim_state: optim
            .state_bytes()
            .map_err(|e| Error::Config(format!("saving the optimizer state: {e}")))?,
    };
    let path = checkpoint::save(dir, &mut ck, checkpoint::DEFAULT_KEEP)?;
    reporter.checkpoint(&path);
    Ok(())
}
