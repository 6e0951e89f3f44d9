//! [`ZeroRedundancy`]: the Learner's optimizer state sharded by parameter, PyTorch's
//! `ZeroRedundancyOptimizer` (ZeRO stage 1), for `Distributed::with_sharding(Sharding::Optimizer)`.
//!
//! Note [Learner ZeRO]
//! The Learner owns its optimizer and steps its own model (`Learner::optimizer_step`), so
//! phalanx's sharded engines, whose optimizer steps each rank's *elements* (`ShardParams`),
//! cannot drive it. What fits is ZeRO-1 by whole parameter, as PyTorch's
//! `ZeroRedundancyOptimizer` partitions: every trainable tensor has one owner rank (the
//! largest tensors first, each to the rank with the fewest elements so far, the lowest rank
//! on a tie: the same on every rank, from the shapes alone). After DDP's allreduce each rank
//! hands `optimizer_step` the averaged gradients of the tensors it owns only; Burn's optimizers
//! skip a tensor without a gradient and create no state for it, so Adam's moments exist on
//! the owner alone (about 1/world of them per rank). Then each rank broadcasts the tensors it
//! stepped, one broadcast per rank, and every rank takes the values into its Learner. SGD,
//! Adam and AdamW update each element from its own gradient and state, so the parameters are
//! bitwise DDP's. The cost: one more broadcast of the parameters per step, and the model loaded
//! into the Learner after it (its one way in, Note [Buffers into the Learner]).
//!
//! Checkpoints hold the whole optimizer state: burn-train's checkpointer writes rank 0's
//! `OptimizerRecord`, so before each epoch's checkpoint every rank sends the state of the
//! tensors it owns, keyed by the tensor's position among the model's floats (each process has
//! its own parameter ids), and rank 0 loads the union, keyed by its own ids, into its Learner
//! for the checkpointer, then goes back to its own share ([`ZeroRedundancy::gather_state`]).
//! A resume loads that whole state into every rank; each then keeps its own share
//! ([`ZeroRedundancy::keep_own_state`]). Reading a Learner's record takes the one accessor
//! phalanx adds to burn-train (`Learner::optimizer_record`, vendor/burn-train/PHALANX.md).

use std::collections::BTreeMap;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{GradientsParams, OptimizerRecord};
use burn::tensor::{Bytes, Tensor};
use burn_train::{Learner, LearnerModel};
use phalanx_checkpoint::optim_state::{self, ParamState};
use phalanx_checkpoint::state_dict::float_param_ids;
use phalanx_ddp::adapter::burn::{params_to_flat, set_params_from_flat};
use phalanx_ddp::adapter::{StateInfo, StateKind};
use phalanx_pg::ProcessGroup;

use crate::error::{Error, Result};

/// Who steps which trainable tensor (Note [Learner ZeRO]).
#[derive(Debug, Clone)]
pub(crate) struct ZeroRedundancy {
    /// The owner of each float tensor, in canonical order; `None` for those not trained
    /// (buffers, frozen parameters).
    owners: Vec<Option<usize>>,
    /// The elements of each float tensor.
    numels: Vec<usize>,
    rank: usize,
    world: usize,
}

impl ZeroRedundancy {
    /// The partition of `states` (the model's tensors, as DDP lists them) over `world` ranks.
    pub(crate) fn new(states: &[StateInfo], rank: usize, world: usize) -> Self {
        let floats: Vec<&StateInfo> = states.iter().filter(|s| s.kind.is_float()).collect();
        let numels: Vec<usize> = floats.iter().map(|s| s.info.numel()).collect();
        let mut order: Vec<usize> = (0..floats.len())
            .filter(|&i| floats[i].kind == StateKind::Trainable)
            .collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(numels[i]), i));
        let mut load = vec![0usize; world];
        let mut owners = vec![None; floats.len()];
        for i in order {
            let least = (0..world)
                .min_by_key(|&r| (load[r], r))
                .expect("a group has a rank");
            owners[i] = Some(least);
            load[least] += numels[i];
        }
        ZeroRedundancy {
            owners,
            numels,
            rank,
            world,
        }
    }

    /// The elements of the trainable tensors this rank owns (and keeps optimizer state for).
    pub(crate) fn owned_elements(&self) -> usize {
        self.owners
            .iter()
            .zip(&self.numels)
            .filter(|(o, _)| **o == Some(self.rank))
            .map(|(_, n)| n)
            .sum()
    }

    /// `grads` without the tensors another rank owns: what this rank's optimizer steps.
    pub(crate) fn owned_grads<M: Module>(
        &self,
        module: &M,
        grads: GradientsParams,
    ) -> GradientsParams {
        let mut keep = KeepOwned {
            zero: self,
            grads,
            at: 0,
        };
        module.visit(&mut keep);
        keep.grads
    }

    /// Every rank's stepped tensors into `module` (this rank's own are already in it): one
    /// broadcast from each rank of the tensors it owns. A collective.
    pub(crate) fn gather<M: Module>(&self, pg: &ProcessGroup, module: M) -> Result<M> {
        let mut values = params_to_flat(&module).map_err(|e| self.failed("reading", e))?;
        for root in 0..self.world {
            let mine: Vec<usize> = (0..values.len())
                .filter(|&i| self.owners[i] == Some(root))
                .collect();
            let mut buf: Vec<f32> = match root == self.rank {
                true => mine
                    .iter()
                    .flat_map(|&i| values[i].iter().copied())
                    .collect(),
                false => vec![0.0; mine.iter().map(|&i| self.numels[i]).sum()],
            };
            if buf.is_empty() {
                continue;
            }
            pg.broadcast(&mut buf, root)
                .map_err(|source| Error::Collective {
                    rank: self.rank,
                    operation: "broadcasting the parameters each rank stepped (ZeRO-1)",
                    source,
                })?;
            let mut at = 0;
            for &i in &mine {
                values[i].copy_from_slice(&buf[at..at + self.numels[i]]);
                at += self.numels[i];
            }
        }
        set_params_from_flat(module, &values).map_err(|e| self.failed("writing", e))
    }

    /// Every rank's share of the optimizer state, joined on rank 0 into a record keyed by
    /// its Learner's parameter ids (for its checkpointer); `None` on the other ranks, and
    /// where no rank has any state. A collective.
    pub(crate) fn gather_state<M: LearnerModel>(
        &self,
        pg: &ProcessGroup,
        learner: &Learner<M>,
    ) -> Result<Option<OptimizerRecord>> {
        let ids = float_param_ids(&learner.model());
        // Keyed by position among the floats: each process has its own parameter ids.
        let mine: Vec<ParamState> = self
            .own_states(learner, &ids)?
            .into_values()
            .map(|mut st| {
                st.id = position_of(&ids, st.id) as u64;
                st
            })
            .collect();
        let bytes = optim_state::encode(&mine).map_err(|e| self.state_err(e))?;
        let collective = |source| Error::Collective {
            rank: self.rank,
            operation: "gathering the ranks' optimizer state for the checkpoint (ZeRO-1)",
            source,
        };
        let Some(all) = phalanx_pg::gather_object(pg, &bytes, 0).map_err(collective)? else {
            return Ok(None);
        };
        let mut whole = BTreeMap::new();
        for theirs in all {
            for (position, mut st) in optim_state::decode(&theirs).map_err(|e| self.state_err(e))? {
                st.id = ids[position as usize];
                whole.insert(st.id, st);
            }
        }
        // No state anywhere (plain SGD, or no step yet): rank 0's own record is the whole.
        if whole.is_empty() {
            return Ok(None);
        }
        self.record(whole.values()).map(Some)
    }

    /// Keeps in `learner`'s optimizer the state of this rank's tensors only (after a resume
    /// loaded every rank's, or after rank 0's checkpoint).
    pub(crate) fn keep_own_state<M: LearnerModel>(&self, learner: &mut Learner<M>) -> Result<()> {
        if learner.optimizer_record().is_empty() {
            return Ok(());
        }
        let ids = float_param_ids(&learner.model());
        let own = self.own_states(learner, &ids)?;
        let record = self.record(own.values())?;
        learner.load_optim(record);
        Ok(())
    }

    /// The optimizer state of the tensors this rank owns, by parameter id (`ids`: the model's
    /// float ids in canonical order).
    fn own_states<M: LearnerModel>(
        &self,
        learner: &Learner<M>,
        ids: &[u64],
    ) -> Result<BTreeMap<u64, ParamState>> {
        let record = learner.optimizer_record();
        if record.is_empty() {
            return Ok(BTreeMap::new());
        }
        let bytes = record
            .into_bytes()
            .map_err(|e| self.state_err(e.to_string()))?;
        let mut states = optim_state::decode(&bytes).map_err(|e| self.state_err(e))?;
        states.retain(|id, _| {
            ids.iter()
                .position(|i| i == id)
                .is_some_and(|at| self.owners.get(at).copied().flatten() == Some(self.rank))
        });
        Ok(states)
    }

    /// `states` as an optimizer record.
    fn record<'a>(
        &self,
        states: impl IntoIterator<Item = &'a ParamState>,
    ) -> Result<OptimizerRecord> {
        let bytes = optim_state::encode(states).map_err(|e| self.state_err(e))?;
        OptimizerRecord::from_bytes(Bytes::from_bytes_vec(bytes))
            .map_err(|e| self.state_err(e.to_string()))
    }

    fn state_err(&self, reason: String) -> Error {
        Error::OptimizerState {
            rank: self.rank,
            reason,
        }
    }

    fn failed(&self, what: &'static str, source: phalanx_ddp::Error) -> Error {
        Error::Ddp {
            rank: self.rank,
            operation: match what {
                "reading" => "reading the parameters to broadcast (ZeRO-1)",
                _ => "writing the broadcast parameters (ZeRO-1)",
            },
            source: Box::new(source),
        }
    }
}

/// Where `id` is among the model's float parameter ids.
fn position_of(ids: &[u64], id: u64) -> usize {
    ids.iter()
        .position(|&i| i == id)
        .expect("the optimizer steps the model's own parameters")
}

/// Removes from `grads` the gradients of the float tensors another rank owns, visiting the
/// module's float tensors in canonical order (the order of [`ZeroRedundancy::new`]'s states).
struct KeepOwned<'a> {
    zero: &'a ZeroRedundancy,
    grads: GradientsParams,
    at: usize,
}

impl ModuleVisitor for KeepOwned<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if self.zero.owners.get(self.at).copied().flatten() != Some(self.zero.rank) {
            self.grads.remove::<D>(param.id);
        }
        self.at += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use phalanx_ddp::adapter::ParamInfo;

    fn state(name: &str, numel: usize, kind: StateKind) -> StateInfo {
        StateInfo {
            info: ParamInfo {
                name: name.into(),
                shape: vec![numel],
            },
            kind,
        }
    }

    #[test]
    fn the_largest_tensors_go_first_to_the_least_loaded_rank() {
        let states = [
            state("a", 10, StateKind::Trainable),
            state("running_mean", 100, StateKind::Buffer),
            state("b", 40, StateKind::Trainable),
            state("c", 30, StateKind::Trainable),
            state("d", 10, StateKind::Trainable),
        ];
        let zero = ZeroRedundancy::new(&states, 0, 2);
        // b (40) to 0; c (30) to 1; a (10) to 1 (30 < 40); d (10): 40 each, the lowest rank.
        assert_eq!(zero.owners, [Some(1), None, Some(0), Some(1), Some(0)]);
        assert_eq!(zero.owned_elements(), 50);
        assert_eq!(ZeroRedundancy::new(&states, 1, 2).owned_elements(), 40);
    }

    #[test]
    fn one_rank_owns_everything_trainable() {
        let states = [
            state("a", 3, StateKind::Trainable),
            state("frozen", 5, StateKind::Frozen),
        ];
        let zero = ZeroRedundancy::new(&states, 0, 1);
        assert_eq!(zero.owners, [Some(0), None]);
    }
}
