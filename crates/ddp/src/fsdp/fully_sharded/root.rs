//! [`Root`]: the model's parameters outside the `FullyShard` blocks, and whether the module
//! holds them whole now (Note [Full sharding]): gathered from their owners before a forward
//! pass (`unshard`), freed after the step (`reshard`), or, where parameters are not sharded,
//! written back whole after every step.

use phalanx_pg::ProcessGroup;

use super::pieces::Pieces;
use crate::adapter::burn::{set_floats_in_order, set_floats_shaped, Shaped};
use crate::adapter::StateKind;
use crate::fsdp::collectives::{gather_unit, scatter_into_params, wait_gather};
use crate::layout::{Ownership, Unit};
use crate::step_core::StepCore;
use crate::Result;
use burn::module::Module;

/// The root's units and whether the module holds their parameters whole.
pub(super) struct Root {
    /// DDP's buckets without the blocks' parameters, in launch order.
    units: Vec<Unit>,
    /// Whether the parameters are freed between steps (they are sharded: `full`, `hybrid`).
    frees: bool,
    /// Whether the module holds the root's gathered parameters now.
    unsharded: bool,
}

impl Root {
    /// The root of `units`; where `frees`, the module's trainable tensors were freed already.
    pub(super) fn new(units: Vec<Unit>, frees: bool) -> Root {
        Root {
            units,
            frees,
            unsharded: !frees,
        }
    }

    /// The root's units, in launch order.
    pub(super) fn units(&self) -> &[Unit] {
        &self.units
    }

    /// Whether the module holds the root's whole parameters now.
    pub(super) fn is_unsharded(&self) -> bool {
        self.unsharded
    }

    /// All-gathers the root's parameters from their owners in `shard_pg` into the module, unit
    /// by unit; nothing to do when they are whole already. A collective.
    pub(super) fn unshard<M: Module>(
        &mut self,
        core: &mut StepCore<M>,
        pieces: &Pieces,
        shard_pg: &ProcessGroup,
    ) -> Result<()> {
        if self.unsharded {
            return Ok(());
        }
        let mut works = Vec::with_capacity(self.units.len());
        {
            let shard = pieces.shard();
            for unit in &self.units {
                let own = pieces.own_values(unit, &shard)?;
                works.push(gather_unit(shard_pg, unit, own));
            }
        }
        let mut whole: Vec<Vec<f32>> = core.infos().iter().map(|i| vec![0.0; i.numel()]).collect();
        for (k, (unit, work)) in self.units.iter().zip(works).enumerate() {
            let buffer = wait_gather(work, k)?;
            scatter_into_params(unit, pieces.ownership(), &buffer, &mut whole);
        }
        let module = core.take();
        let values = core
            .infos()
            .iter()
            .zip(&whole)
            .zip(core.grad_from_module())
            .filter(|(_, &root)| root)
            .map(|((info, v), _)| (info.name.clone(), (v.as_slice(), info.shape.as_slice())))
            .collect();
        let module = set_floats_shaped(module, values);
        core.put(module);
        self.unsharded = true;
        Ok(())
    }

    /// Frees the module's root parameters (their values live in the shard), where parameters
    /// are sharded.
    pub(super) fn reshard<M: Module>(&mut self, core: &mut StepCore<M>) {
        if !self.frees || !self.unsharded {
            return;
        }
        let empty: &[f32] = &[];
        let module = core.take();
        let freed = core
            .infos()
            .iter()
            .zip(core.grad_from_module())
            .filter(|(_, &root)| root)
            .map(|(info, _)| (info.name.clone(), (empty, &[][..])))
            .collect();
        let module = set_floats_shaped(module, freed);
        core.put(module);
        self.unsharded = false;
    }

    /// After a step: the updated parameters, `gathered` unit by unit, into the module, or,
    /// where parameters are sharded, the gathered ones freed.
    pub(super) fn place_gathered<M: Module>(
        &mut self,
        core: &mut StepCore<M>,
        ownership: &Ownership,
        gathered: Vec<Vec<f32>>,
    ) {
        match self.frees {
            false => self.write_gathered(core, ownership, gathered),
            true => self.reshard(core),
        }
    }

    /// Puts every unit's gathered buffer back into the module's parameters.
    fn write_gathered<M: Module>(
        &self,
        core: &mut StepCore<M>,
        ownership: &Ownership,
        gathered: Vec<Vec<f32>>,
    ) {
        let module = core.take();
        let infos = core.infos();
        let mut whole: Vec<Vec<f32>> = vec![Vec::new(); infos.len()];
        for (unit, buffer) in self.units.iter().zip(gathered) {
            match unit.params() {
                // One parameter: its owner-major buffer is the parameter, moved as it is.
                &[p] => whole[p] = buffer,
                params => {
                    for &p in params {
                        whole[p] = vec![0.0; infos[p].numel()];
                    }
                    scatter_into_params(unit, ownership, &buffer, &mut whole);
                }
            }
        }
        let values: Vec<Shaped> = whole
            .into_iter()
            .zip(infos)
            .map(|(v, info)| (v, info.shape.clone()))
            .collect();
        let which: Vec<bool> = core
            .states()
            .iter()
            .filter(|s| s.kind.is_float())
            .map(|s| s.kind == StateKind::Trainable)
            .collect();
        // The values move into the tensors: no copy of the model on the way.
        let module = set_floats_in_order(module, &which, values);
        core.put(module);
    }
}
