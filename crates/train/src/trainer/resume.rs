//! `--resume`: the newest intact checkpoint into a run's model, its position and optimizer
//! state to every rank.

use phalanx_checkpoint as checkpoint;
use phalanx_checkpoint::position::{Handover, Position};
use phalanx_pg::ProcessGroup;

use crate::{
    config::{Reporter, TrainConfig},
    snapshot, Classifier, Error, Optim, Result,
};

/// `--resume`: rank 0 reads the newest checkpoint that verifies (written whole, or sharded at
/// any world size: Note [Sharded checkpoints]) into `model`; the position and the whole
/// optimizer state reach every rank by broadcast, the parameters through the wrapper's
/// initial broadcast. Returns the position and the optimizer state, which the caller loads
/// once the model is wrapped (under a sharded mode each rank keeps its pieces of it). Without
/// `--resume`: the start. With `every_rank` (a model about to be cut across ranks, whose
/// pieces no broadcast of rank 0's would reach), every rank reads the checkpoint into its
/// whole model.
pub(super) fn resume_from_disk<M: Classifier>(
    pg: &ProcessGroup,
    cfg: &TrainConfig,
    facts: &std::collections::HashMap<String, String>,
    model: &mut M,
    reporter: &mut dyn Reporter,
    every_rank: bool,
) -> Result<(Position, Option<Vec<u8>>)> {
    let rank = pg.rank();
    let world = pg.world_size() as u64;
    let start = Position {
        world,
        ..Position::default()
    };
    if !cfg.resume {
        return Ok((start, None));
    }
    let mut handover = Handover::default();
    let mut optim_state = None;
    let mut resumed_meta = None;
    if rank == 0 || every_rank {
        let dir = cfg
            .checkpoint_dir
            .as_ref()
            .ok_or_else(|| Error::Config("--resume needs --checkpoint-dir".into()))?;
        let newest = checkpoint::load_newest_intact(dir)?;
        if rank == 0 {
            for d in &newest.damaged {
                reporter.checkpoint_skipped(d);
            }
            if newest.checkpoint.is_none() {
                reporter.nothing_to_resume(dir);
            }
        }
        if let Some(ck) = newest.checkpoint {
            snapshot::check_compatible(&ck.meta, facts, cfg)?;
            let path = checkpoint::record_path(dir, ck.meta.global_step);
            *model = checkpoint::state_dict::load_module(model.clone(), &ck, &path)?;
            handover = Handover {
                position: Some(ck.meta.position()),
                optim_bytes: ck.optim_state.as_ref().map(Vec::len),
            };
            optim_state = ck.optim_state;
            resumed_meta = Some(ck.meta);
        }
    }
    if every_rank {
        same_checkpoint(pg, cfg, resumed_meta.as_ref().map(|m| m.global_step))?;
    }
    let handover = handover.broadcast(pg, 0)?;
    // The momentum buffers reach every rank from rank 0, like the parameters.
    let state = handover.broadcast_optim_state(pg, 0, optim_state)?;
    if let Some(m) = resumed_meta.as_ref().filter(|_| rank == 0) {
        reporter.resumed(m);
    }
    let Some(at) = handover.position else {
        return Ok((start, None));
    };
    let has_state = Optim::new(cfg.optim).has_state();
    if handover.optim_bytes.is_none() && has_state && rank == 0 {
        tracing::warn!(
            "--resume: the checkpoint holds no optimizer state (written before its first step, \
             or by an older phalanx); the {} state restarts from zero",
            cfg.optim.kind
        );
    }
    Ok((at, state))
}

/// Every rank read the checkpoint rank 0 read (`step`: the step of the one this rank read):
/// else the rank and both steps are named, since a rank that read another (a directory that is
/// not shared, a stale view of one) would train its piece from other parameters. A collective.
fn same_checkpoint(pg: &ProcessGroup, cfg: &TrainConfig, step: Option<u64>) -> Result<()> {
    let mine = step.map_or(-1, |s| s as i64);
    let mut all = vec![0i64; pg.world_size()];
    pg.allgather(&[mine], &mut all)?;
    let said = |s: i64| match s {
        -1 => "no checkpoint".to_string(),
        s => format!("the checkpoint of step {s}"),
    };
    match all.iter().position(|&s| s != all[0]) {
        None => Ok(()),
        Some(rank) => Err(Error::Config(format!(
            "--resume: rank {rank} found {} in {}, rank 0 {}: under --tp/--pp every rank reads \
             the checkpoint, so every rank must see the same directory (a shared filesystem)",
            said(all[rank]),
            cfg.checkpoint_dir
                .as_deref()
                .map_or("?".into(), |d| d.display().to_string()),
            said(all[0])
        ))),
    }
}
