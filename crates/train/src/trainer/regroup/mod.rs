//! What a rank holds between the attempts of a run, and how it gets back to its group's common
//! state after the group changed (`phalanx launch --fault-tolerance`): [`Held`].
//!
//! Note [Regroup state]
//! A run is a sequence of attempts, one per generation of its process group (Note
//! [FT generations] in phalanx-pg); without fault tolerance there is one. Between two attempts a
//! rank holds one of three things, and [`Held`] is the one place that knows which:
//! - the whole model ([`Holding::Whole`]): before the first attempt (built, or resumed from
//!   disk), a replacement's freshly built one, or what DDP's replicas hold after an attempt;
//! - what a rank of a sharded run held when its attempt ended ([`Holding::Shard`]): the module
//!   and its pieces, read without a collective (Note [Regroup of shards]);
//! - nothing ([`Holding::Lent`]): the engine holds the model during an attempt, and a run
//!   without fault tolerance gives it away for good (a kept copy would keep every parameter
//!   alive under `--sharding full`).
//!
//! The transitions: an attempt takes the model ([`Held::lend`]) and, under fault tolerance,
//! gives back what its engine holds at the end ([`Held::end_attempt`]). When the group changes
//! (a rank failed, or a replacement is connected: [`Held::group_changed`]), the next attempt
//! first makes every rank's state the newest one any rank holds ([`Held::resync`]: the
//! replicas' Note [A regroup] or the shards' Note [Regroup of shards]), so the attempt starts
//! from one state on every rank. A cut model's ranks also keep what they held before their
//! last step's update, and resync on a new mesh ([`Held::resync_pieces`], Note [Replicas that
//! leave and join]).
//!
//! Note [Islands of shards that leave and join]
//! Under `--outer` with a sharding mode inside the islands, a rank holds pieces of its own island's
//! model, and the islands differ between syncs: a regroup over the whole group (Note [Regroup of
//! shards]) would mix them. It runs in two stages instead. An island whose ranks all hold one step
//! (whole in its state: Note [Islands that leave and join] in phalanx-ddp), and all hold it alike,
//! first joins its pieces over its own ranks, which makes the island's model and optimizer state
//! whole on each of them; the rank keeps that whole state, so that a regroup failing later finds it
//! whole and does not join again. An island that lost a rank holds pieces no peer island can
//! complete (every island cut its own), and one whose ranks hold different things (some joined,
//! some not, when a regroup failed between them) cannot join them either: their ranks count as
//! replacements, as a DDP island with a replacement in it does. The ranks agree on what they hold
//! with one all-gather of the island first, so that all of them or none enter the join. Then the
//! replicas' regroup (Note [A regroup]) runs over the whole group, on an optimizer of its own, with
//! every whole island keeping its own, and the others take the state of the lowest rank at the
//! newest step. The whole optimizer state is cut again for the island's new shards, as a resumed
//! checkpoint's is. A heal that fails leaves the engine as it was, and the rank keeps its pieces; a
//! rank whose sharding engine could not be set up (a collective), which holds the model with no
//! copy kept, takes a peer's state as a replacement does ([`Held::lost`]). `full`, `grad` and
//! `optimizer`, refused under fault tolerance without islands (no rank holds a copy of a dead
//! rank's pieces), are recoverable here with two islands or more: the other islands are the copies.

mod pieces;
mod plan;
mod replicas;
mod shards;

pub(super) use pieces::Previous;

use std::time::Instant;

use phalanx_ddp::fsdp::LocalShard;
use phalanx_ddp::Local;
use phalanx_pg::ProcessGroup;

use crate::{Classifier, Error, Optim, Result};
use phalanx_checkpoint::position::Position;

/// What a rank holds of its model between attempts (Note [Regroup state]).
#[derive(Debug)]
enum Holding<M> {
    /// The whole model.
    Whole(M),
    /// A sharded run's module and this rank's pieces.
    Shard(LocalShard<M>),
    /// The engine has it.
    Lent,
}

/// Where a regroup took its state from, for the report of the first step after it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Source {
    /// From the failure (for a replacement: from its start of training).
    pub(super) since: Instant,
    /// The rank of the new group whose state every rank took.
    pub(super) rank: usize,
    /// Whether this rank is a replacement (it held no state).
    pub(super) replacement: bool,
}

/// A rank's model, position and pending optimizer state between attempts (Note [Regroup
/// state]).
#[derive(Debug)]
pub(super) struct Held<M> {
    holding: Holding<M>,
    /// The step this rank's state belongs to; `None` for a replacement, which holds none.
    position: Option<Position>,
    /// The whole optimizer state the next engine loads (a checkpoint's, or the one a sharded
    /// regroup made whole again, to be cut anew).
    optim_state: Option<Vec<u8>>,
    /// Since when the group has been changing: the next attempt resyncs first.
    changed: Option<Instant>,
    /// Under a cut model: what this rank held before its last step's update.
    previous: Option<Previous<M>>,
}

impl<M: Classifier> Held<M> {
    /// A rank that starts at `position` with `model` (built, or resumed from disk) and the
    /// optimizer state a checkpoint held.
    pub(super) fn start(model: M, position: Position, optim_state: Option<Vec<u8>>) -> Self {
        Held {
            holding: Holding::Whole(model),
            position: Some(position),
            optim_state,
            changed: None,
            previous: None,
        }
    }

    /// A replacement: its freshly built model is only a template, and it takes its state
    /// from a peer before anything else.
    pub(super) fn replacement(model: M) -> Self {
        Held {
            holding: Holding::Whole(model),
            position: None,
            optim_state: None,
            changed: Some(Instant::now()),
            previous: None,
        }
    }

    /// The group changed at `since` (a failure, or a generation connected at a boundary).
    pub(super) fn group_changed(&mut self, since: Instant) {
        self.changed = Some(since);
    }

    /// After a change of the group: makes this rank's model, position and optimizer state the
    /// newest any rank of `pg` holds, whole (`sharded`: from the pieces the ranks hold; in
    /// islands, `island`: Note [Islands of shards that leave and join]). With `keep_own`, a
    /// rank whose island is whole in its state keeps it. A collective of the new group;
    /// nothing to do before the first change.
    pub(super) fn resync(
        &mut self,
        (pg, island): (&ProcessGroup, Option<&ProcessGroup>),
        optim: &mut Optim,
        sharded: bool,
        keep_own: bool,
    ) -> Result<Option<Source>> {
        if self.changed.is_none() {
            return Ok(None);
        }
        let synced = match (sharded, island, &mut self.holding) {
            (true, None, holding) => {
                // A replacement's template is its freshly built model; a survivor's, its own
                // module.
                let (template, mine) = match holding {
                    Holding::Shard(local) => (local.module.clone(), Some(local)),
                    Holding::Whole(built) => (built.clone(), None),
                    Holding::Lent => unreachable!("an attempt under fault tolerance gives back"),
                };
                let (model, at, from, state) =
                    shards::resync_sharded(pg, &template, mine, optim, self.position)?;
                // The whole state is cut again for the new group's shards.
                *optim = Optim::new(*optim.options());
                self.optim_state = state;
                (model, at, from)
            }
            (true, Some(island), _) => {
                let (model, held) = self.whole_island(island, optim, keep_own)?;
                // The islands' regroup works on whole states, with an optimizer of its own: a
                // failure in it leaves this rank's state as the island's join left it.
                let mut whole = Optim::new(*optim.options());
                if let Some(state) = self.optim_state.clone().filter(|_| held.is_some()) {
                    whole
                        .load_state(state)
                        .map_err(|e| Error::Config(format!("the island's optimizer state: {e}")))?;
                }
                let synced = replicas::resync(pg, &model, &mut whole, held, keep_own)?;
                // The whole state is cut again for the island's shards.
                self.optim_state = whole.state_bytes().map_err(|e| {
                    Error::Config(format!("fault tolerance: the optimizer's state: {e}"))
                })?;
                *optim = Optim::new(*optim.options());
                synced
            }
            (false, _, Holding::Whole(model)) => {
                replicas::resync(pg, model, optim, self.position, keep_own)?
            }
            (false, _, _) => unreachable!("fault tolerance keeps the whole model under DDP"),
        };
        Ok(Some(self.resynced(synced)))
    }

    /// In islands of shards (Note [Islands of shards that leave and join]): the whole model
    /// this rank takes into the islands' regroup, and the step it holds for it (`None`:
    /// nothing a peer island lacks). An island whole in its state (`keep_own`) whose ranks all
    /// hold their pieces joins them once, and keeps the result (a regroup that fails after
    /// the join finds it whole the next time); one whose ranks all hold it whole already keeps
    /// that; any other, its ranks holding different things, counts as replacements, as an
    /// island that lost a rank does. A collective of `island`.
    fn whole_island(
        &mut self,
        island: &ProcessGroup,
        optim: &mut Optim,
        keep_own: bool,
    ) -> Result<(M, Option<Position>)> {
        // What each rank holds: its pieces (2), its island's whole state (1), or no step (0).
        let mine = match (&self.holding, self.position) {
            (_, None) => 0,
            (Holding::Shard(_), Some(_)) => 2,
            (Holding::Whole(_), Some(_)) => 1,
            (Holding::Lent, _) => unreachable!("an attempt under fault tolerance gives back"),
        };
        let mut all = vec![0i64; island.world_size()];
        island.allgather(&[mine], &mut all)?;
        let alike = keep_own && all.iter().all(|&k| k == mine);
        match (alike, &mut self.holding) {
            (true, Holding::Shard(local)) => {
                let template = local.module.clone();
                let (model, at, _, state) =
                    shards::resync_sharded(island, &template, Some(local), optim, self.position)?;
                *optim = Optim::new(*optim.options());
                self.holding = Holding::Whole(model.clone());
                self.position = Some(at);
                self.optim_state = state;
                Ok((model, Some(at)))
            }
            (true, Holding::Whole(model)) => Ok((model.clone(), self.position)),
            (_, Holding::Shard(local)) => Ok((shards::whole_template(local), None)),
            (_, Holding::Whole(model)) => Ok((model.clone(), None)),
            (_, Holding::Lent) => unreachable!("an attempt under fault tolerance gives back"),
        }
    }

    /// Holds `model` at `position` after a resync from `rank` of the new group, and says where
    /// the state came from (this rank was a replacement if it held no position).
    fn resynced(&mut self, (model, position, rank): (M, Position, usize)) -> Source {
        let since = self.changed.take().expect("a resync follows a change");
        let replacement = self.position.is_none();
        self.holding = Holding::Whole(model);
        self.position = Some(position);
        Source {
            since,
            rank,
            replacement,
        }
    }

    /// After a change of the group, under a cut model: makes this rank's piece, position and
    /// optimizer state those of the newest step every piece reached, on `template` (this
    /// generation's piece, cut on its groups; `None`: the held one is) from its data-parallel
    /// peers in `dp` where it holds no state at that step (Note [Replicas that leave and
    /// join]). A collective of `world`; nothing to do before the first change.
    pub(super) fn resync_pieces(
        &mut self,
        (world, dp): (&ProcessGroup, &ProcessGroup),
        template: Option<M>,
        optim: &mut Optim,
        epoch_loss: &mut (f64, usize, usize),
    ) -> Result<Option<Source>> {
        if self.changed.is_none() {
            return Ok(None);
        }
        let Holding::Whole(model) = &self.holding else {
            unreachable!("fault tolerance keeps a cut model's piece whole")
        };
        let holds = pieces::Holds {
            model,
            at: self.position,
            previous: self.previous.as_ref(),
        };
        let synced = pieces::resync(world, dp, holds, template, optim, epoch_loss)?;
        self.previous = None;
        Ok(Some(self.resynced(synced)))
    }

    /// The model for the next attempt's engine: a copy when `keep` (fault tolerance under DDP
    /// goes on with its own after a failure), else the model itself.
    pub(super) fn lend(&mut self, keep: bool) -> M {
        let model = match (keep, std::mem::replace(&mut self.holding, Holding::Lent)) {
            (true, Holding::Whole(model)) => {
                self.holding = Holding::Whole(model.clone());
                model
            }
            (_, Holding::Whole(model)) => model,
            (_, _) => unreachable!("the model is whole before each attempt"),
        };
        model
    }

    /// The step this rank's state belongs to; `None` for a replacement.
    pub(super) fn held_position(&self) -> Option<Position> {
        self.position
    }

    /// Whether an attempt holds the model: one that failed before its engine gave the model
    /// back left this rank with none.
    pub(super) fn is_lent(&self) -> bool {
        matches!(self.holding, Holding::Lent)
    }

    /// An attempt failed before its engine gave the model back (a sharding engine takes it
    /// whole, with no copy kept): this rank holds nothing of its state any more, and takes a
    /// peer's as a replacement does, into `template` (the model built again).
    pub(super) fn lost(&mut self, template: M) {
        self.holding = Holding::Whole(template);
        self.forget();
    }

    /// This rank gave up its state (left alone in its island under `--outer`): like a
    /// replacement, it takes a peer's at the next attempt.
    pub(super) fn forget(&mut self) {
        self.position = None;
        self.previous = None;
        self.optim_state = None;
        self.changed = Some(Instant::now());
    }

    /// Where the next attempt starts.
    pub(super) fn position(&self) -> Position {
        self.position.unwrap_or_default()
    }

    /// The optimizer state the next engine loads, once.
    pub(super) fn optim_state(&mut self) -> &mut Option<Vec<u8>> {
        &mut self.optim_state
    }

    /// An attempt ended at `at` (its last completed step), its engine giving back what this
    /// rank holds under fault tolerance, and under a cut model what it held before its last
    /// step's update.
    pub(super) fn end_attempt(
        &mut self,
        at: Position,
        kept: Option<Local<M>>,
        previous: Option<Previous<M>>,
    ) {
        self.previous = previous;
        match kept {
            Some(Local::Whole(model)) => self.holding = Holding::Whole(model),
            Some(Local::Shard(local)) => self.holding = Holding::Shard(local),
            None => {}
        }
        self.position = Some(at);
    }
}
