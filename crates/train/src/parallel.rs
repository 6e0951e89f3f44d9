//! [`Parallel`]: what the trainer wraps its model in, DDP or a sharded mode (`--sharding`),
//! and what differs between them: the step, where the parameters are whole, the optimizer's
//! state (whole, or this rank's pieces: Note [Shard layout] in phalanx-ddp) and checkpoints.

use std::sync::Arc;

use phalanx_ddp::adapter::burn as adapter;
use phalanx_ddp::adapter::StateKind;
use phalanx_ddp::fsdp::{FsdpOptions, FullyShardedDataParallel, Sharding};
use phalanx_ddp::{CommStats, DdpOptions, DistributedDataParallel};
use phalanx_pg::ProcessGroup;

use crate::checkpoint::sharded::{ranges_of, LayoutEntry, Shard, Sharded};
use crate::optim::state;
use crate::{forward_backward, Classifier, Error, Optim, Result};

/// The model in its data-parallel wrapper.
pub(crate) enum Parallel<M: Classifier> {
    /// `--sharding none`.
    Ddp(DistributedDataParallel<M>),
    /// `--sharding optimizer|grad|full`.
    Sharded(FullyShardedDataParallel<M>),
}

/// How a step averages and applies its gradients.
#[derive(Debug, Clone, Copy)]
pub(crate) enum StepKind {
    /// Each bucket updated as soon as it arrives.
    Fused,
    /// Every bucket averaged before any update (fault tolerance, Note [Regroup]).
    Unfused,
    /// Clipped to this global norm first.
    Clipped(f32),
}

impl<M: Classifier> Parallel<M> {
    /// Wraps `model` for `sharding` (a collective: the agreement check and the broadcast).
    pub(crate) fn new(
        model: M,
        pg: Arc<ProcessGroup>,
        sharding: Sharding,
        reshard_after_forward: bool,
        shard_group_size: Option<usize>,
        ddp: DdpOptions,
    ) -> Result<Self> {
        Ok(match sharding {
            Sharding::None => Parallel::Ddp(DistributedDataParallel::new(model, pg, ddp)?),
            _ => Parallel::Sharded(FullyShardedDataParallel::new(
                model,
                pg,
                FsdpOptions::new(sharding)
                    .with_ddp(ddp)
                    .with_reshard_after_forward(reshard_after_forward)
                    .with_shard_group_size(shard_group_size),
            )?),
        })
    }

    /// The model with its parameters whole (gathered first under `full`): for a forward
    /// pass, evaluation or a digest. A collective under `full`.
    pub(crate) fn whole(&mut self) -> Result<&M> {
        match self {
            Parallel::Ddp(ddp) => Ok(ddp.module()),
            Parallel::Sharded(fsdp) => {
                fsdp.unshard()?;
                Ok(fsdp.module())
            }
        }
    }

    /// Under `full`: frees the gathered parameters again (after evaluation).
    pub(crate) fn release(&mut self) {
        if let Parallel::Sharded(fsdp) = self {
            fsdp.reshard();
        }
    }

    /// One training step of `features`/`labels`: forward, backward, averaged gradients,
    /// update. Returns this rank's loss. A collective.
    pub(crate) fn step(
        &mut self,
        optim: &mut Optim,
        features: &[f32],
        labels: &[i64],
        kind: StepKind,
    ) -> Result<f32> {
        let (grads, loss) = {
            let model = self.whole()?;
            let _c = phalanx_core::trace::span("forward+backward", "compute");
            forward_backward(model, features, labels)?
        };
        match self {
            Parallel::Ddp(ddp) => match kind {
                StepKind::Fused => ddp.sync_and_step(grads, |m, g| optim.step(m, g))?,
                StepKind::Unfused => {
                    let g = ddp.sync_gradients(grads)?;
                    ddp.map_module(|m| optim.step(m, g));
                }
                StepKind::Clipped(max) => {
                    let (g, _) = ddp.sync_gradients_clipped(grads, max)?;
                    ddp.map_module(|m| optim.step(m, g));
                }
            },
            Parallel::Sharded(fsdp) => match kind {
                StepKind::Fused => fsdp.sync_and_step(grads, |s, g| optim.step(s, g))?,
                StepKind::Unfused => fsdp.sync_and_step_unfused(grads, |s, g| optim.step(s, g))?,
                StepKind::Clipped(max) => {
                    fsdp.sync_and_step_clipped(grads, max, |s, g| optim.step(s, g))?;
                }
            },
        }
        Ok(loss)
    }

    /// SHA-256 of every float tensor's value in canonical order ([`param_digest`] of the whole
    /// model; its blocks gathered under `full`: a collective then).
    ///
    /// [`param_digest`]: crate::param_digest
    pub(crate) fn digest(&mut self) -> Result<String> {
        match self {
            Parallel::Ddp(ddp) => crate::param_digest(ddp.module()),
            Parallel::Sharded(fsdp) => Ok(crate::step::digest_of(&fsdp.full_params()?)),
        }
    }

    /// The training state this rank holds between steps (ZeRO's accounting, Note [Shard
    /// layout] in phalanx-ddp): the parameters it keeps (the model's whole ones and the
    /// shard's pieces), the averaged gradients a step holds, the optimizer's state.
    pub(crate) fn state_memory(&self, optim: &Optim) -> Result<StateMemory> {
        let mib = |floats: usize| floats as f64 * 4.0 / (1024.0 * 1024.0);
        let optim_mib = optim
            .state_bytes()
            .map_err(optim_err)?
            .map_or(0.0, |b| b.len() as f64 / (1024.0 * 1024.0));
        let held = |infos: Vec<phalanx_ddp::adapter::ParamInfo>| -> usize {
            infos.iter().map(|i| i.numel()).sum()
        };
        Ok(match self {
            Parallel::Ddp(ddp) => {
                let whole = held(ddp.param_infos().to_vec());
                StateMemory {
                    params_mib: mib(whole),
                    grads_mib: mib(whole),
                    optim_mib,
                }
            }
            Parallel::Sharded(fsdp) => {
                let trainable: usize = fsdp.param_infos().iter().map(|i| i.numel()).sum();
                let kept: usize = adapter::param_infos(fsdp.module())
                    .iter()
                    .zip(fsdp.state_infos())
                    .filter(|(_, s)| s.kind == StateKind::Trainable)
                    .map(|(i, _)| i.numel())
                    .sum();
                let shard = fsdp.shard().numel();
                let grads = match fsdp.options().sharding.shards_gradients() {
                    true => shard,
                    false => trainable,
                };
                StateMemory {
                    params_mib: mib(kept + shard),
                    grads_mib: mib(grads),
                    optim_mib,
                }
            }
        })
    }

    /// Communication statistics so far.
    pub(crate) fn stats(&self) -> CommStats {
        match self {
            Parallel::Ddp(ddp) => ddp.stats(),
            Parallel::Sharded(fsdp) => fsdp.stats(),
        }
    }

    /// What this rank holds of its model, without a collective (Note [Regroup of shards]);
    /// DDP's model is whole on every rank.
    pub(crate) fn into_local(self) -> Result<phalanx_ddp::fsdp::LocalShard<M>> {
        match self {
            Parallel::Sharded(fsdp) => Ok(fsdp.into_local()?),
            Parallel::Ddp(_) => unreachable!("DDP's regroup takes the whole model"),
        }
    }

    /// The model, whole (gathered under `full`: a collective).
    pub(crate) fn into_inner(self) -> Result<M> {
        match self {
            Parallel::Ddp(ddp) => Ok(ddp.into_inner()),
            Parallel::Sharded(fsdp) => Ok(fsdp.into_inner()?),
        }
    }

    /// Loads the whole optimizer state `bytes` (a checkpoint's, keyed by stable ids): all of
    /// it under DDP, this rank's pieces of it under a sharded mode.
    pub(crate) fn load_optim_state(&self, optim: &mut Optim, bytes: Vec<u8>) -> Result<()> {
        let bytes = match self {
            Parallel::Ddp(_) => bytes,
            Parallel::Sharded(fsdp) => {
                let whole = state::decode(&bytes).map_err(optim_err)?;
                let infos = fsdp.param_infos();
                let mut mine = Vec::with_capacity(fsdp.piece_params().len());
                for (p, range) in fsdp.piece_params() {
                    let id = fsdp.float_position(*p) as u64 + 1;
                    let Some(st) = whole.get(&id) else {
                        return Err(Error::Config(format!(
                            "--resume: the checkpoint's optimizer state has nothing for \
                             parameter {} (id {id})",
                            infos[*p].name
                        )));
                    };
                    mine.push(
                        st.slice(infos[*p].numel(), range.clone())
                            .map_err(optim_err)?,
                    );
                }
                state::encode(&mine).map_err(optim_err)?
            }
        };
        optim
            .load_state(bytes)
            .map_err(|e| Error::Config(format!("the checkpoint's optimizer state: {e}")))
    }

    /// This rank's shard of a sharded checkpoint (Note [Sharded checkpoints]) and the layout
    /// the manifest records; `None` under DDP (rank 0 writes the whole model).
    pub(crate) fn shard(&self, optim: &Optim) -> Result<Option<(Shard, Sharded)>> {
        let Parallel::Sharded(fsdp) = self else {
            return Ok(None);
        };
        let pg = fsdp.process_group();
        let rank = pg.rank();
        let infos = fsdp.param_infos();
        let values = fsdp.shard().values()?;
        let mut shard = Shard::default();
        let states = match optim.state_bytes().map_err(optim_err)? {
            Some(bytes) => state::decode(&bytes).map_err(optim_err)?,
            None => Default::default(),
        };
        // Under `hybrid` the first shard group writes the pieces; its replicas hold the same.
        let pieces = match fsdp.saves_pieces() {
            true => fsdp.piece_params(),
            false => &[],
        };
        for ((p, _), v) in pieces.iter().zip(values) {
            let name = infos[*p].name.clone();
            let id = fsdp.float_position(*p) as u64 + 1;
            if let Some(st) = states.get(&id) {
                shard.optim.push((name.clone(), st.clone()));
            }
            shard.tensors.push((name, v));
        }
        // The tensors that are not sharded, whole, from rank 0.
        let all = fsdp.state_infos();
        let floats: Vec<_> = all.iter().filter(|s| s.kind.is_float()).collect();
        if rank == 0 {
            let module_values = adapter::params_to_flat(fsdp.module())?;
            for (s, v) in floats.iter().zip(module_values) {
                if s.kind != StateKind::Trainable {
                    shard.tensors.push((s.info.name.clone(), v));
                }
            }
        }
        let mut trainable = 0;
        let layout = floats
            .iter()
            .map(|s| {
                let ranges = match s.kind == StateKind::Trainable {
                    true => {
                        let r = ranges_of(fsdp.saved_ranges(trainable));
                        trainable += 1;
                        r
                    }
                    false => Vec::new(),
                };
                LayoutEntry {
                    name: s.info.name.clone(),
                    shape: s.info.shape.clone(),
                    ranges,
                }
            })
            .collect();
        Ok(Some((
            shard,
            Sharded {
                sharding: fsdp.options().sharding.name().to_string(),
                shards: Vec::new(),
                tensors: layout,
            },
        )))
    }
}

fn optim_err(e: String) -> Error {
    Error::Config(format!("the optimizer's state: {e}"))
}

/// The training state one rank holds, in MiB (ZeRO's accounting: what each mode shards).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StateMemory {
    /// Parameters: the model's whole ones (none under `full` between steps) and the shard's.
    pub params_mib: f64,
    /// The averaged gradients the step holds: whole under `none`/`optimizer`, the shard's
    /// under `grad`/`full`.
    pub grads_mib: f64,
    /// The optimizer's state (momentum, Adam's moments), as its record measures it.
    pub optim_mib: f64,
}

impl StateMemory {
    /// All three.
    pub fn total_mib(&self) -> f64 {
        self.params_mib + self.grads_mib + self.optim_mib
    }
}
