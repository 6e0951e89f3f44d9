//! Buffers (BatchNorm's running statistics): which float tensors they are, and how they are
//! made equal on every rank after every step ([`BufferSync`]; Note [Parameters, buffers and
//! frozen] in `adapter/burn.rs`).

use std::collections::HashMap;

use burn::module::Module;
use phalanx_core::ReduceOp;
use phalanx_pg::ProcessGroup;

use crate::adapter::burn::{floats_to_flat, flush_running_state, set_floats_by_name};
use crate::adapter::{StateInfo, StateKind};
use crate::step_header::Agreement;
use crate::{BufferSync, Error, Result};

/// The buffers of a model and how they are synchronised.
pub(crate) struct Buffers {
    /// Positions among the float tensors, canonical order.
    positions: Vec<usize>,
    /// Their module paths, in the same order.
    names: Vec<String>,
    mode: BufferSync,
}

impl Buffers {
    /// The buffers among `states` (floats first, as `state_infos` lists them).
    pub(crate) fn new(states: &[StateInfo], mode: BufferSync) -> Self {
        let floats = states.iter().filter(|s| s.kind.is_float());
        let (positions, names) = floats
            .enumerate()
            .filter(|(_, s)| s.kind == StateKind::Buffer)
            .map(|(i, s)| (i, s.info.name.clone()))
            .unzip();
        Buffers {
            positions,
            names,
            mode,
        }
    }

    /// After a step: every rank takes the values of the authority (the lowest rank that ran
    /// the step), or the average over the ranks that ran it. A collective when there is
    /// anything to synchronise (the same answer on every rank).
    pub(crate) fn sync<M: Module>(
        &self,
        pg: &ProcessGroup,
        module: M,
        agreement: &Agreement,
    ) -> (M, Result<()>) {
        let Some(authority) = agreement.authority() else {
            return (module, Ok(())); // Nobody ran a forward pass: nothing changed.
        };
        if self.mode == BufferSync::Off || self.positions.is_empty() || pg.world_size() == 1 {
            return (module, Ok(()));
        }
        let _s = phalanx_core::trace::span("buffers", "comm");
        flush_running_state(&module);
        match self.exchange(pg, &module, authority, agreement) {
            Ok(values) => {
                let by_name: HashMap<String, &[f32]> = self
                    .names
                    .iter()
                    .cloned()
                    .zip(values.iter().map(Vec::as_slice))
                    .collect();
                (set_floats_by_name(module, by_name), Ok(()))
            }
            Err(e) => (module, Err(e)),
        }
    }

    fn exchange<M: Module>(
        &self,
        pg: &ProcessGroup,
        module: &M,
        authority: usize,
        agreement: &Agreement,
    ) -> Result<Vec<Vec<f32>>> {
        let values = floats_to_flat(module, &self.positions)?;
        let mut flat: Vec<f32> = values.iter().flatten().copied().collect();
        let err = |op| move |source| Error::Sync { op, source };
        match self.mode {
            BufferSync::Off => unreachable!("sync returns early without buffer sync"),
            BufferSync::Broadcast => pg
                .broadcast(&mut flat, authority)
                .map_err(err("broadcast(buffers)"))?,
            BufferSync::Average => {
                // Joined ranks hold stale buffers: they contribute zeros and are not counted.
                if !agreement.is_active(pg.rank()) {
                    flat.fill(0.0);
                }
                pg.allreduce(&mut flat, ReduceOp::Sum)
                    .map_err(err("allreduce(buffers)"))?;
                let active = agreement.active_ranks() as f32;
                flat.iter_mut().for_each(|v| *v /= active);
            }
        }
        Ok(split(&flat, values.iter().map(Vec::len)))
    }
}

/// Cuts `flat` into consecutive pieces of the given lengths.
pub(crate) fn split<T: Clone>(flat: &[T], lens: impl Iterator<Item = usize>) -> Vec<Vec<T>> {
    let mut rest = flat;
    lens.map(|n| {
        let (head, tail) = rest.split_at(n);
        rest = tail;
        head.to_vec()
    })
    .collect()
}
