//! A run's mesh under model parallelism (`--tp`, `--pp`): its groups, the model cut and split
//! on them, and what the trainer does differently with a cut model (the step, the scores, the
//! whole model's digest). Note [Tensor-parallel run], Note [Pipeline run].

use std::sync::Arc;

use burn::tensor::Gradients;
use phalanx_ddp::adapter::{
    burn::{state_infos, without_drawing},
    StateKind,
};
use phalanx_ddp::ModelNorm;
use phalanx_pg::{Mesh, ProcessGroup};

mod pieces;

pub(crate) use pieces::Pieces;

use crate::pipeline::PipelineStage;
use crate::step::Score;
use crate::tensor_parallel::TensorParallel;
use crate::{with_stable_ids, Classifier, Error, Result, TrainConfig};

/// The flags that cut the model, as the user gave them (`--tp 2 --pp 2`).
pub(crate) fn flags(cfg: &TrainConfig) -> String {
    [
        (cfg.tp > 1).then(|| format!("--tp {}", cfg.tp)),
        cfg.sequence_parallel
            .then(|| "--sequence-parallel".to_string()),
        (cfg.pp.stages > 1).then(|| format!("--pp {}", cfg.pp.stages)),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" ")
}

/// The flags that shape the model and its layout on the ranks, and those that decide which
/// collectives a step, a checkpoint and a resume run, as this rank was started with them:
/// `(flag, value)`.
fn layout_flags(cfg: &TrainConfig) -> Vec<(&'static str, String)> {
    let pp = &cfg.pp;
    // An outer flag's value, `none` without --outer.
    let outer = |flag, value: &dyn Fn(&phalanx_ddp::outer::OuterOptions) -> String| {
        (flag, cfg.outer.as_ref().map_or("none".into(), value))
    };
    vec![
        ("--model", cfg.model.to_string()),
        ("--hidden", cfg.hidden.to_string()),
        ("--depth", cfg.depth.to_string()),
        ("--heads", cfg.heads.to_string()),
        ("--seq-len", cfg.seq_len.to_string()),
        ("--tp", cfg.tp.to_string()),
        ("--sequence-parallel", cfg.sequence_parallel.to_string()),
        ("--pp", pp.stages.to_string()),
        ("--microbatches", pp.microbatches.to_string()),
        ("--pp-schedule", pp.schedule.to_string()),
        ("--virtual-stages", pp.virtual_stages.to_string()),
        (
            "--pp-split",
            pp.split.as_ref().map_or("balanced".into(), |s| {
                s.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
            }),
        ),
        ("--sharding", cfg.sharding.to_string()),
        // What decides the collectives of a step, a checkpoint and a resume.
        (
            "--grad-clip",
            cfg.grad_clip.map_or("none".into(), |c| c.to_string()),
        ),
        ("--freeze", cfg.freeze.clone().unwrap_or("none".into())),
        ("--bf16", cfg.bf16.to_string()),
        (
            "--checkpoint-dir",
            match cfg.checkpoint_dir {
                Some(_) => "given".into(),
                None => "none".into(),
            },
        ),
        ("--checkpoint-every", cfg.checkpoint_every.to_string()),
        ("--resume", cfg.resume.to_string()),
        // The outer sync's collectives and their sizes (Note [Islands run]).
        outer("--outer", &|o| o.mode.to_string()),
        outer("--sync-every", &|o| o.sync_every.to_string()),
        outer("--outer-dtype", &|o| o.dtype.to_string()),
        outer("--island-size", &|o| {
            o.island_size.map_or("a host's".into(), |n| n.to_string())
        }),
        outer("--fragments", &|o| o.fragments.to_string()),
        outer("--fragment-delay", &|o| o.fragment_delay.to_string()),
        outer("--fragment-alpha", &|o| o.fragment_alpha.to_string()),
    ]
}

/// Every rank of `pg` was started with the same model and layout flags as rank 0: else the
/// first rank and flag that differ are named, on every rank, before any collective of the
/// mesh could pair one rank's exchange with another's (which would say only that two
/// collectives mismatch). One all-gather of a short line per rank. A collective.
pub(crate) fn check_same_layout(pg: &ProcessGroup, cfg: &TrainConfig) -> Result<()> {
    let mine = layout_flags(cfg);
    let line: String = mine
        .iter()
        .map(|(flag, value)| format!("{flag} {value}\n"))
        .collect();
    let all = phalanx_pg::all_gather_object(pg, line.as_bytes())?;
    let first = String::from_utf8_lossy(&all[0]).into_owned();
    for (rank, theirs) in all.iter().enumerate().skip(1) {
        let theirs = String::from_utf8_lossy(theirs);
        if let Some((a, b)) = first.lines().zip(theirs.lines()).find(|(a, b)| a != b) {
            return Err(Error::Config(format!(
                "rank {rank} was started with {b}, rank 0 with {a}: every rank of a run must \
                 be started with the same model and layout flags"
            )));
        }
    }
    Ok(())
}

/// The mesh `("pp", P), ("dp", D), ("tp", T)` of a run and this rank's parts of it.
#[derive(Debug)]
pub(crate) struct ModelParallel {
    /// This rank's data-parallel group: the engine's and the data's.
    pub(crate) dp: Arc<ProcessGroup>,
    tp: Option<TensorParallel>,
    pp: Option<PipelineStage>,
    /// The whole model's gradient norm from this rank's piece's (`--grad-clip`).
    norm: Arc<ModelNorm>,
    /// Where this rank's pieces lie in the whole model (checkpoints).
    pieces: Pieces,
    /// The whole world: a checkpoint's group.
    world: Arc<ProcessGroup>,
}

impl ModelParallel {
    /// Lays `pg` out on the mesh and cuts `model` into this rank's stage (`--pp`), then splits
    /// that on its tensor-parallel group (`--tp`): a collective of `pg`. Refused, naming the
    /// numbers, for a model without the split asked for, or a world that `tp × pp` does not
    /// divide. With `replicas_outermost` (under `--fault-tolerance`) each model replica is
    /// `tp × pp` consecutive ranks (Note [Replicas that leave and join]).
    pub(crate) fn split<M: Classifier>(
        pg: &Arc<ProcessGroup>,
        cfg: &TrainConfig,
        model: M,
        replicas_outermost: bool,
    ) -> Result<(ModelParallel, M)> {
        let (tp, pp) = (cfg.tp, cfg.pp.stages);
        crate::tensor_parallel::check_model(cfg.model, tp)?;
        let world = pg.world_size();
        if !world.is_multiple_of(tp * pp) {
            return Err(Error::Config(format!(
                "{}: the world of {world} rank(s) is not a multiple of {} (each model replica \
                 takes tp × pp ranks)",
                flags(cfg),
                tp * pp
            )));
        }
        let dp = world / (tp * pp);
        let mesh = match replicas_outermost {
            true => Mesh::new(pg, &[("dp", dp), ("pp", pp), ("tp", tp)])?,
            false => Mesh::new(pg, &[("pp", pp), ("dp", dp), ("tp", tp)])?,
        };
        let group = |name: &str| {
            mesh.group(name)
                .cloned()
                .expect("the mesh has the dimensions it was given")
        };
        // The whole model's layout without drawing it (Note [Deferred init]).
        let whole = match model.deferred_init() {
            true => without_drawing(|| state_infos(&model)),
            false => state_infos(&model),
        };
        let linear = phalanx_checkpoint::state_dict::torch_transposed(&model);
        let mut model = model;
        let stage = match pp > 1 {
            true => {
                // Under sequence parallelism a rank sends its positions only.
                let positions = match cfg.sequence_parallel {
                    true => cfg.seq_len / tp,
                    false => cfg.seq_len,
                };
                let row = [positions, cfg.hidden];
                let (stage, cut) = PipelineStage::cut(group("pp"), &cfg.pp, row, model)?;
                // A stage whose compute runs collectives of another group (tensor
                // parallelism's, or the data-parallel all-gather of a block's parameters at
                // its first pass under `full` and `hybrid`: Note [Microbatched units]) sends
                // each message when it is made only if its peers read it while they compute
                // (Note [Background progress] in phalanx-transport); MPI and NCCL pair them.
                if tp > 1 || cfg.sharding.shards_parameters() {
                    stage.group().start_progress()?;
                }
                model = with_stable_ids(cut);
                Some(stage)
            }
            false => None,
        };
        let tensor = match tp > 1 {
            true => {
                let (tensor, split) = TensorParallel::split(group("tp"), cfg, model)?;
                model = split;
                Some(tensor)
            }
            false => None,
        };
        let norm = Arc::new(model_norm(&model, tensor.as_ref(), stage.as_ref()));
        let local = state_infos(&model);
        let positions = match &stage {
            Some(stage) => stage.positions(&model.chunk_tensors())?,
            None => (0..local.iter().filter(|s| s.kind.is_float()).count()).collect(),
        };
        let places = tensor.as_ref().map(TensorParallel::places);
        let first_replica = group("dp").rank() == 0;
        let pieces = Pieces::new(&whole, linear, &local, &positions, places, first_replica)?;
        let parts = ModelParallel {
            dp: group("dp"),
            tp: tensor,
            pp: stage,
            norm,
            pieces,
            world: pg.clone(),
        };
        Ok((parts, model))
    }

    /// What completes a clipped step's norm into the whole model's (the engine's options).
    pub(crate) fn norm(&self) -> Arc<ModelNorm> {
        self.norm.clone()
    }

    /// Where this rank's pieces lie in the whole model.
    pub(crate) fn pieces(&self) -> &Pieces {
        &self.pieces
    }

    /// The whole world (every replica's every piece): a checkpoint's group.
    pub(crate) fn world(&self) -> &Arc<ProcessGroup> {
        &self.world
    }

    /// Breaks every group of this mesh with `reason` (fault tolerance, after a failure): a
    /// peer blocked in one of them with this rank, which leaves for a new generation, wakes
    /// with an error instead of waiting for its timeout. Groups that failed already stay as
    /// they are.
    pub(crate) fn abort(&self, reason: &str) {
        let tp = self.tp.as_ref().map(TensorParallel::group);
        let pp = self.pp.as_ref().map(PipelineStage::group);
        for group in [Some(&self.dp), tp, pp, Some(&self.world)]
            .into_iter()
            .flatten()
        {
            if group.failure().is_none() {
                group.abort(reason);
            }
        }
    }

    /// Ranks of one model replica: `tp × pp`.
    pub(crate) fn size(&self) -> usize {
        self.tp.as_ref().map_or(1, TensorParallel::size)
            * self.pp.as_ref().map_or(1, PipelineStage::size)
    }

    /// The forward and backward of one batch on this rank's part of the model: through the
    /// pipeline's schedule under `--pp`, at once otherwise.
    pub(crate) fn forward_backward<M: Classifier>(
        &self,
        model: &M,
        features: &[f32],
        labels: &[i64],
        seed: u64,
    ) -> Result<(Gradients, f32)> {
        caught(|| match &self.pp {
            Some(stage) => stage.forward_backward(model, features, labels, seed),
            None => crate::forward_backward(model, features, labels),
        })
    }

    /// The model's score on this rank's rows (the same on every stage of a pipeline).
    pub(crate) fn score<M: Classifier>(&self, model: &M, x: &[f32], y: &[i64]) -> Result<Score> {
        caught(|| match &self.pp {
            Some(stage) => stage.score(model, x, y),
            None => crate::score(model, x, y),
        })
    }

    /// Hands `f` the whole model's float tensors in canonical order, one at a time, from this
    /// rank's (`mine`): each gathered over the tensor-parallel group, then broadcast over the
    /// pipeline's (Note [One block at a time] in phalanx-ddp: the end of a run hashes the
    /// model without holding it). A collective of both.
    pub(crate) fn for_each_whole<M: Classifier>(
        &self,
        model: &M,
        mine: Vec<Vec<f32>>,
        f: &mut dyn FnMut(&[f32]),
    ) -> Result<()> {
        let mut whole_of = |k: usize, piece: &[f32]| match &self.tp {
            Some(tp) => tp.whole_of(k, piece),
            None => Ok(piece.to_vec()),
        };
        match &self.pp {
            Some(pp) => pp.for_each_whole(&mine, &model.chunk_tensors(), &mut whole_of, f),
            None => {
                for (k, piece) in mine.iter().enumerate() {
                    f(&whole_of(k, piece)?);
                }
                Ok(())
            }
        }
    }

    /// Whether a step runs the model once per microbatch (`--pp`).
    pub(crate) fn microbatched(&self) -> bool {
        self.pp.is_some()
    }

    /// The pipeline's measured bubble and its theory, under `--pp`.
    pub(crate) fn bubble(&self) -> Result<Option<crate::pipeline::Bubble>> {
        Ok(self
            .pp
            .as_ref()
            .map(PipelineStage::bubble)
            .transpose()?
            .flatten())
    }
}

/// The groups over which `model`'s piece's gradient norm completes into the whole model's
/// (tensor-parallel, then pipeline), and which of its trainable parameters count (Note [Norm
/// across a cut model] in phalanx-ddp).
/// `f`, with a collective that fails inside its graph returned as the group's failure (Note
/// [Failures inside a graph] in phalanx-tensor-parallel): fault tolerance re-forms the group.
fn caught<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    use phalanx_tensor_parallel::Error as Tp;
    match phalanx_tensor_parallel::catch_failures(f) {
        // The vocabulary-parallel loss and arg-max return their collectives' errors.
        Ok(Err(Error::TensorParallel(Tp::Pg(e)))) | Err(Tp::Pg(e)) => Err(Error::Pg(e)),
        Ok(result) => result,
        Err(other) => Err(Error::TensorParallel(other)),
    }
}

fn model_norm<M: Classifier>(
    model: &M,
    tp: Option<&TensorParallel>,
    pp: Option<&PipelineStage>,
) -> ModelNorm {
    let floats: Vec<StateKind> = state_infos(model)
        .into_iter()
        .map(|s| s.kind)
        .filter(StateKind::is_float)
        .collect();
    let counted = tp.map_or_else(|| vec![true; floats.len()], TensorParallel::counted);
    let counted = floats
        .iter()
        .zip(counted)
        .filter(|(kind, _)| matches!(kind, StateKind::Trainable))
        .map(|(_, counted)| counted)
        .collect();
    let groups = [tp.map(TensorParallel::group), pp.map(PipelineStage::group)]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    ModelNorm::new(groups, counted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> phalanx_pg::Error {
        phalanx_pg::Error::Failed {
            rank: 1,
            cause: "gone".into(),
        }
    }

    /// A tensor-parallel collective's failure, returned by the vocabulary-parallel loss or
    /// unwound from a backward, is the group's failure, which fault tolerance regroups on.
    #[test]
    fn a_tensor_parallel_collective_failure_is_the_groups() {
        use phalanx_tensor_parallel::Error as Tp;
        let returned: Result<()> = caught(|| Err(Error::TensorParallel(Tp::Pg(failed()))));
        assert!(matches!(returned, Err(Error::Pg(_))), "{returned:?}");
        let other: Result<()> = caught(|| Err(Error::Config("no".into())));
        assert!(matches!(other, Err(Error::Config(_))), "{other:?}");
        assert_eq!(caught(|| Ok(3)).unwrap(), 3);
    }
}
