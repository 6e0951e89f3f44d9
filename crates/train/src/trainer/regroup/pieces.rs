//! Taking a cut model's pieces from the data-parallel peers after the process group was
//! re-formed (`phalanx launch --fault-tolerance` under `--tp` or `--pp`).
//!
//! Note [Replicas that leave and join]: under `--tp`/`--pp` a model replica is `tp × pp` ranks
//! that cannot train with one missing, so the replicas live and die whole (Note [Whole blocks]
//! in phalanx-pg): the mesh puts each replica on consecutive ranks (`("dp", D), ("pp", P),
//! ("tp", T)`, where a run without fault tolerance puts the pipeline outermost), and when one
//! of its ranks dies the replica's other ranks leave too and join again, as replacements, once
//! the dead rank's replacement is ready. The other replicas go on alone meanwhile. Each
//! generation is a new mesh, and a piece holds its tensor-parallel group inside its modules,
//! so every generation's pieces are cut anew from the model built again from its spec
//! (undrawn under deferred init, so a rank draws only its piece, and nothing of the whole
//! model is kept between generations: a clone of the first build would share its lazily drawn
//! tensors and keep the whole stage's weights drawn) and take the values a rank held.
//!
//! Every piece of the new group must come from one step. A replica's pieces update apart:
//! each after its own data-parallel all-reduce, so a death can leave one piece of a surviving
//! replica one step ahead of another (its all-reduce completed, the other's failed). The ranks
//! meet in one all-reduce after every step (the agreement on the newest generation), so no two
//! ranks are more than one step apart, and each rank keeps what it held before its last
//! step's update ([`Previous`]: the module and the optimizer; the update replaces every
//! tensor, so this is one more copy of the piece and its optimizer state, the memory fault
//! tolerance costs here). [`resync`] takes the newest step that every piece reached on some rank: a
//! rank one step past it goes back to what it held before, a rank at it keeps what it holds,
//! and every other (a replacement, a replica that left) takes its piece from the lowest
//! data-parallel peer that holds that step, as DDP's replicas do (Note [A regroup]). The run
//! then goes on from one step on every rank with the data order of an uninterrupted run. A
//! rank that took its piece takes its source's count of the epoch's loss too: the replica it
//! rejoins measured the steps it missed. Ranks at one step can still stand on either side of
//! an epoch's end (one piece's collectives there completed, another's failed), so every rank
//! takes rank 0's position: all of them run the same collectives next.

use phalanx_checkpoint::position::Position;
use phalanx_core::ReduceOp;
use phalanx_ddp::adapter::burn as adapter;
use phalanx_pg::ProcessGroup;

use super::replicas;
use crate::{Classifier, Error, Optim, Result};

/// What a rank held before its last step's update (Note [Replicas that leave and join]).
#[derive(Debug)]
pub(in crate::trainer) struct Previous<M> {
    /// The step that state belongs to.
    pub(in crate::trainer) at: Position,
    pub(in crate::trainer) model: M,
    pub(in crate::trainer) optim: Optim,
    /// The epoch's loss sum, count and samples then.
    pub(in crate::trainer) epoch_loss: (f64, usize, usize),
}

/// What a rank holds when the group changed: its piece at its last step, and before it.
pub(super) struct Holds<'a, M> {
    pub(super) model: &'a M,
    pub(super) at: Option<Position>,
    pub(super) previous: Option<&'a Previous<M>>,
}

/// Makes every rank's piece, optimizer and position those of the newest step every piece
/// reached (Note [Replicas that leave and join]). `template` is this generation's piece as cut
/// on its groups (`None`: the held one already is); `dp` the rank's data-parallel group of
/// the new mesh, `world` the whole new group. Returns the piece, the position, and the rank
/// of `world` this rank's piece came from. A collective of `world`; `optim` and `epoch_loss`
/// change only once it succeeded, so that a failure inside leaves the rank's state whole for
/// the next regroup.
pub(super) fn resync<M: Classifier>(
    world: &ProcessGroup,
    dp: &ProcessGroup,
    holds: Holds<'_, M>,
    template: Option<M>,
    optim: &mut Optim,
    epoch_loss: &mut (f64, usize, usize),
) -> Result<(M, Position, usize)> {
    let step = |p: Option<Position>| p.map_or(-1, |p| p.global_step as i64);
    // The newest step some holder of this piece reached, then the oldest of those.
    let mut newest = [step(holds.at)];
    dp.allreduce(&mut newest, ReduceOp::Max)?;
    let mut target = newest;
    world.allreduce(&mut target, ReduceOp::Min)?;
    let target = target[0];
    if target < 0 {
        return Err(Error::Config(format!(
            "fault tolerance: rank {} of the new process group and every data-parallel peer of \
             it hold no state (each replica lost a rank, or this piece's every holder): no \
             piece can be taken from a peer; resume from a checkpoint with --max-restarts",
            world.rank()
        )));
    }
    let mut loss = *epoch_loss;
    let (model, at, mut local) = if step(holds.at) == target {
        (holds.model.clone(), holds.at, optim.clone())
    } else {
        match holds.previous {
            Some(previous) if previous.at.global_step as i64 == target => {
                tracing::info!(
                    rank = world.rank(),
                    "fault tolerance: step {} is not whole in the new group; this rank goes back \
                     to step {target}",
                    target + 1
                );
                loss = previous.epoch_loss;
                let optim = previous.optim.clone();
                (previous.model.clone(), Some(previous.at), optim)
            }
            // It holds no state at that step: it takes its peer's.
            _ => (holds.model.clone(), None, optim.clone()),
        }
    };
    let model = match (template, at) {
        (Some(template), Some(_)) => same_values(template, &model)?,
        // It takes a peer's values: the new piece is the template (a replacement holds the
        // whole model as built, not a piece).
        (Some(template), None) => template,
        (None, _) => model,
    };
    let (model, position, source) = replicas::resync(dp, &model, &mut local, at, false)?;
    // A replica's ranks all count its loss: one that took its state takes its source's count
    // of the epoch too, so that every rank reports one training loss.
    let mut sent = [loss.0, loss.1 as f64, loss.2 as f64];
    dp.broadcast(&mut sent, source)?;
    if at.is_none() {
        loss = (sent[0], sent[1] as usize, sent[2] as usize);
    }
    // Ranks at one step can still be on either side of an epoch's end (a piece's collectives
    // there completed, another's failed): every rank takes rank 0's position, so that all
    // run the same collectives next.
    let mut p = [
        position.epoch,
        position.step_in_epoch,
        position.global_step,
        position.samples_in_epoch,
        position.world,
    ]
    .map(|v| v as i64);
    world.broadcast(&mut p, 0)?;
    let [epoch, step_in_epoch, global_step, samples_in_epoch, sampled_by] = p.map(|v| v as u64);
    let position = Position {
        epoch,
        step_in_epoch,
        global_step,
        samples_in_epoch,
        world: sampled_by,
    };
    *optim = local;
    *epoch_loss = loss;
    // The data-parallel group's rank `source` is that replica's rank at this rank's place.
    let replica = world.world_size() / dp.world_size();
    Ok((model, position, source * replica + world.rank() % replica))
}

/// `template` (a piece cut on this generation's groups) with the values of `held` (the same
/// piece, cut on an earlier generation's).
fn same_values<M: Classifier>(template: M, held: &M) -> Result<M> {
    let model = adapter::set_params_from_flat(template, &adapter::params_to_flat(held)?)?;
    let discrete = adapter::discrete_to_bytes(held);
    Ok(match discrete.is_empty() {
        true => model,
        false => adapter::set_discrete_from_bytes(model, discrete),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use burn::tensor::Device;
    use phalanx_pg::Mesh;

    use super::*;
    use crate::model::{Mlp, MlpConfig};
    use crate::{Optim, OptimOptions};

    /// An MLP whose every parameter is `value`.
    fn filled(value: f32) -> Mlp {
        let device = Device::flex().autodiff();
        let mlp = Mlp::new(&MlpConfig::seed(4, 2), 0, &device);
        let sizes: Vec<usize> = adapter::params_to_flat(&mlp)
            .unwrap()
            .iter()
            .map(Vec::len)
            .collect();
        let values: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![value; n]).collect();
        adapter::set_params_from_flat(mlp, &values).unwrap()
    }

    fn at(step: u64) -> Position {
        Position {
            global_step: step,
            step_in_epoch: step,
            ..Position::default()
        }
    }

    /// Two replicas of two pieces. Piece 0 reached step 5 on both replicas, piece 1 only step
    /// 4 (its all-reduce of step 5 failed): every rank ends at step 4, the ranks one step
    /// ahead on what they held before, a replica that left on its peer's piece.
    #[test]
    fn the_newest_step_every_piece_reached_is_taken_and_a_rank_ahead_goes_back() {
        let got = phalanx_testing::spawn_ranks(4, |pg| {
            let pg = Arc::new(pg);
            let mesh = Mesh::new(&pg, &[("dp", 2), ("tp", 2)]).unwrap();
            let dp = mesh.group("dp").unwrap().clone();
            let rank = pg.rank();
            // Rank r: replica r / 2, piece r % 2. Ranks 0 and 2 hold piece 0 at step 5 (value
            // 5) and step 4 before it (value 4); rank 1 holds piece 1 at step 4 (value 40);
            // rank 3's replica left (it holds nothing).
            let (model, held, previous) = match rank {
                0 | 2 => (filled(5.0), Some(at(5)), Some((filled(4.0), at(4)))),
                1 => (filled(40.0), Some(at(4)), Some((filled(30.0), at(3)))),
                _ => (filled(-1.0), None, None),
            };
            let options = OptimOptions::default();
            let previous = previous.map(|(model, at)| Previous {
                at,
                model,
                optim: Optim::new(options),
                epoch_loss: (1.0, 4, 16),
            });
            let holds = Holds {
                model: &model,
                at: held,
                previous: previous.as_ref(),
            };
            let mut optim = Optim::new(options);
            let mut loss = (rank as f64, 5, 20);
            let (model, position, source) =
                resync(&pg, &dp, holds, None, &mut optim, &mut loss).unwrap();
            let first = adapter::params_to_flat(&model).unwrap()[0][0];
            (position.global_step, first, source, loss)
        });
        assert_eq!(got[0], (4, 4.0, 0, (1.0, 4, 16)), "rank 0 goes back");
        assert_eq!(got[2], (4, 4.0, 0, (1.0, 4, 16)), "rank 2 goes back");
        assert_eq!(got[1], (4, 40.0, 1, (1.0, 5, 20)), "rank 1 keeps its own");
        assert_eq!(got[3], (4, 40.0, 1, (1.0, 5, 20)), "rank 3 takes rank 1's");
    }

    /// A piece that no rank holds any more is named, not made up.
    #[test]
    fn a_piece_nobody_holds_is_refused() {
        let got = phalanx_testing::spawn_ranks(2, |pg| {
            let pg = Arc::new(pg);
            let mesh = Mesh::new(&pg, &[("dp", 1), ("tp", 2)]).unwrap();
            let dp = mesh.group("dp").unwrap().clone();
            let model = filled(1.0);
            let held = (pg.rank() == 0).then(|| at(3));
            let holds = Holds {
                model: &model,
                at: held,
                previous: None,
            };
            let mut optim = Optim::new(OptimOptions::default());
            resync(&pg, &dp, holds, None, &mut optim, &mut (0.0, 0, 0))
                .map(|_| ())
                .unwrap_err()
                .to_string()
        });
        for err in got {
            assert!(err.contains("hold no state"), "{err}");
        }
    }
}
