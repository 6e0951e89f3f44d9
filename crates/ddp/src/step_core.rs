//! What DDP's and FSDP's synchronising steps share, owned once: the wrapped module, the whole
//! data-parallel group, the model's tensors as they were wrapped, the buffers, the parameters
//! used by `no_sync` steps, and the `join` loop. Each engine holds one [`StepCore`] and keeps
//! only what differs (buckets on a device; shards, units and the commit vote).
//!
//! Note [Step core]
//! A synchronising step of either engine has the same skeleton: check that the module still
//! has the parameters it was wrapped with, find which of them this rank used (this backward's
//! gradients, or a `no_sync` step's since the last synchronisation), build the step header
//! (Note [Step header]), average the gradients (the engine's part: all-reduced buckets, or
//! reduce-scattered units stepped on their owners), then make the buffers equal. `no_sync`
//! records the used parameters, and `join` answers the other ranks' steps until every rank has
//! joined (Note [Uneven inputs] in `ddp.rs`). Under `--sharding full` some parameters are a
//! `FullyShard` block's: their gradients do not come through the module's backward but through
//! the block's own operation, so the core checks and reads only the parameters the engine
//! says come from the module (`grad_from_module`), and the block's used flags are added to its.

use std::sync::Arc;

use burn::module::Module;
use phalanx_pg::ProcessGroup;

use crate::adapter::burn::{GradTable, Gradients};
use crate::adapter::{ParamInfo, StateInfo};
use crate::buffers::Buffers;
use crate::step_header::{local_header, Agreement};
use crate::{BufferSync, Error, Result};

/// The state both engines' steps share (Note [Step core]).
pub(crate) struct StepCore<M: Module> {
    /// Always `Some` between calls.
    module: Option<M>,
    /// The whole data-parallel group: the step header, the buffers, the initial broadcast.
    pg: Arc<ProcessGroup>,
    /// The trainable parameters, in canonical order.
    infos: Vec<ParamInfo>,
    /// Every tensor of the model, floats first (canonical order), then int and bool tensors.
    states: Vec<StateInfo>,
    /// Whether each trainable parameter's gradient comes from the module's backward (all of
    /// them but a `FullyShard` block's).
    grad_from_module: Vec<bool>,
    buffers: Buffers,
    /// Parameters used by `no_sync` steps since the last synchronisation.
    accumulated_used: Option<Vec<bool>>,
}

impl<M: Module> StepCore<M> {
    /// The core of an engine over `module` (already equal on every rank), whose trainable
    /// parameters are `infos` and tensors `states`; `grad_from_module[p]`: whether parameter `p`'s
    /// gradient comes from the module's backward.
    pub(crate) fn new(
        module: M,
        pg: Arc<ProcessGroup>,
        infos: Vec<ParamInfo>,
        states: Vec<StateInfo>,
        grad_from_module: Vec<bool>,
        buffer_sync: BufferSync,
    ) -> Self {
        debug_assert_eq!(infos.len(), grad_from_module.len());
        let buffers = Buffers::new(&states, buffer_sync);
        StepCore {
            module: Some(module),
            pg,
            infos,
            states,
            grad_from_module,
            buffers,
            accumulated_used: None,
        }
    }

    /// The wrapped module.
    pub(crate) fn module(&self) -> &M {
        self.module
            .as_ref()
            .expect("module is present between calls")
    }

    /// Takes the module out; [`put`](Self::put) brings it back before the call returns.
    pub(crate) fn take(&mut self) -> M {
        self.module.take().expect("module is present between calls")
    }

    /// Brings the module back after [`take`](Self::take).
    pub(crate) fn put(&mut self, module: M) {
        self.module = Some(module);
    }

    /// Replaces the module by `f(module)`.
    pub(crate) fn map(&mut self, f: impl FnOnce(M) -> M) {
        let module = self.take();
        self.put(f(module));
    }

    /// Unwraps the module.
    pub(crate) fn into_module(self) -> M {
        self.module.expect("module is present between calls")
    }

    /// The whole data-parallel group.
    pub(crate) fn pg(&self) -> &Arc<ProcessGroup> {
        &self.pg
    }

    /// The trainable parameters, in canonical order.
    pub(crate) fn infos(&self) -> &[ParamInfo] {
        &self.infos
    }

    /// Every tensor of the model.
    pub(crate) fn states(&self) -> &[StateInfo] {
        &self.states
    }

    /// Whether each trainable parameter's gradient comes from the module's backward.
    pub(crate) fn grad_from_module(&self) -> &[bool] {
        &self.grad_from_module
    }

    /// Whether the gradients in `table` are not those of the parameters the module was
    /// wrapped with (the module was replaced by another one, or, under `full`, the forward
    /// ran on the sharded module).
    pub(crate) fn table_changed(&self, table: &GradTable) -> bool {
        table.len() != self.infos.len()
            || table
                .infos()
                .zip(&self.infos)
                .zip(&self.grad_from_module)
                .any(|((a, b), &grad_from_module)| grad_from_module && a != b)
    }

    /// Which trainable parameters this rank used since the last synchronisation: the module's
    /// from `grads`, a block's from `block_used` (`(parameter, used)`).
    fn used(
        &self,
        table: &GradTable,
        grads: Option<&Gradients>,
        block_used: &[(usize, bool)],
    ) -> Vec<bool> {
        let mut used: Vec<bool> = (0..self.infos.len())
            .map(|p| {
                let now = self.grad_from_module[p] && grads.is_some_and(|g| table.has_grad(p, g));
                now || self.accumulated_used.as_ref().is_some_and(|u| u[p])
            })
            .collect();
        for &(p, u) in block_used {
            used[p] |= u;
        }
        used
    }

    /// A `no_sync` step: remembers which parameters it used, for the next synchronisation.
    pub(crate) fn accumulate_used(&mut self, table: &GradTable, grads: &Gradients) {
        self.accumulated_used = Some(self.used(table, Some(grads), &[]));
    }

    /// The start of a synchronising step (without `grads`, a joined rank's round): this rank's
    /// step header (Note [Step header]), which ends the `no_sync` accumulation of used flags.
    pub(crate) fn header(
        &mut self,
        table: &GradTable,
        grads: Option<&Gradients>,
        block_used: &[(usize, bool)],
    ) -> Vec<f32> {
        let used = self.used(table, grads, block_used);
        self.accumulated_used = None;
        local_header(&used, self.pg.rank(), self.pg.world_size(), grads.is_some())
    }

    /// The end of a synchronising step: the buffers equal on every rank
    /// ([`BufferSync`](crate::BufferSync)).
    pub(crate) fn sync_buffers(&mut self, agreement: &Agreement) -> Result<()> {
        let module = self.take();
        let (module, synced) = self.buffers.sync(&self.pg, module, agreement);
        self.put(module);
        synced
    }
}

/// Uneven inputs (PyTorch's `Join`; Note [Uneven inputs] in `ddp.rs`): runs a joined rank's
/// `round`s (each answers the other ranks' synchronising step) until a round in which no rank
/// had data; returns the rounds that some rank had data in. Refused while `no_sync` gradients
/// wait (`accumulated`): they would be lost.
pub(crate) fn join(
    rank: usize,
    accumulated: bool,
    mut round: impl FnMut() -> Result<Agreement>,
) -> Result<usize> {
    if accumulated {
        return Err(Error::JoinWithAccumulated { rank });
    }
    let mut shadowed = 0;
    loop {
        if round()?.active_ranks() == 0 {
            return Ok(shadowed);
        }
        shadowed += 1;
    }
}
