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
//! The Learner's checkpoint would hold rank 0's share of the optimizer state only: burn-train
//! saves rank 0's `OptimizerRecord` and offers no way to read another's to merge it first, so
//! a resumed run would lose the other ranks' moments. The strategy refuses a checkpointer under
//! this mode rather than write such a checkpoint (docs/learner.md).

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
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
