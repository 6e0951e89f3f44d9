//! The trainer's model in its engine ([`DataParallel`]: DDP, or FSDP under `--sharding`), and
//! what the trainer does with any engine: the step with its optimizer, the digest, the state
//! it holds, the optimizer's state in and out of checkpoints (whole, or this rank's pieces:
//! Note [Shard layout] in phalanx-ddp).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use phalanx_ddp::adapter::burn::{params_to_flat, without_drawing};
use phalanx_ddp::adapter::StateKind;
use phalanx_ddp::fsdp::{FsdpOptions, FullyShardedDataParallel, Sharding};
use phalanx_ddp::{DataParallel, DdpOptions, DistributedDataParallel, StepKind};
use phalanx_pg::ProcessGroup;

use crate::{forward_backward, Classifier, Error, Optim, Result};
use phalanx_checkpoint::optim_state as state;
use phalanx_checkpoint::sharded::{ranges_of, LayoutEntry, Shard, Sharded};

/// How the trainer wraps its model (`--sharding`, `--reshard-after-forward`, the shard groups'
/// size) and DDP's own options.
#[derive(Debug, Clone)]
pub(crate) struct Wrapping {
    pub(crate) sharding: Sharding,
    pub(crate) reshard_after_forward: bool,
    pub(crate) shard_group_size: Option<usize>,
    pub(crate) ddp: DdpOptions,
}

/// Something to do with the model in its engine, whatever the engine: the generic half of
/// [`with_engine`] (a closure cannot be generic over the engine's type).
pub(crate) trait WithEngine<M: Classifier> {
    /// What it returns.
    type Output;
    /// Runs with the engine.
    fn run<E: DataParallel<M>>(self, engine: E) -> Self::Output;
}

/// Wraps `model` as `wrapping` says (a collective: the agreement check and the broadcast) and
/// hands the engine to `then`: DDP under `--sharding none`, FSDP under the others.
pub(crate) fn with_engine<M: Classifier, W: WithEngine<M>>(
    model: M,
    pg: Arc<ProcessGroup>,
    wrapping: Wrapping,
    then: W,
) -> Result<W::Output> {
    Ok(match wrapping.sharding {
        Sharding::None => {
            // What DDP keeps whole is drawn now, before any step; the sharding modes draw
            // each tensor as they cut it.
            crate::model::deferred::draw_all(&model);
            then.run(DistributedDataParallel::new(model, pg, wrapping.ddp)?)
        }
        sharding => {
            let options = FsdpOptions::new(sharding)
                .with_ddp(wrapping.ddp)
                .with_reshard_after_forward(wrapping.reshard_after_forward)
                .with_shard_group_size(wrapping.shard_group_size);
            // A model with deferred init is cut a tensor at a time, never drawn whole (Note
            // [Deferred init]).
            let engine = match model.deferred_init() {
                true => without_drawing(|| FullyShardedDataParallel::new(model, pg, options))?,
                false => FullyShardedDataParallel::new(model, pg, options)?,
            };
            then.run(engine)
        }
    })
}

/// One training step of `features`/`labels` in `engine`: forward on the whole parameters,
/// backward, averaged gradients, `optim`'s update of what the engine keeps. Returns this
/// rank's loss. A collective.
pub(crate) fn step<M: Classifier, E: DataParallel<M>>(
    engine: &mut E,
    optim: &mut Optim,
    features: &[f32],
    labels: &[i64],
    kind: StepKind,
) -> Result<f32> {
    step_with(engine, optim, kind, |model| {
        forward_backward(model, features, labels)
    })
}

/// [`step`] with another forward and backward (a pipeline stage's: its gradients and the
/// batch's loss).
pub(crate) fn step_with<M: Classifier, E: DataParallel<M>>(
    engine: &mut E,
    optim: &mut Optim,
    kind: StepKind,
    forward_backward: impl FnOnce(&M) -> Result<(burn::tensor::Gradients, f32)>,
) -> Result<f32> {
    let (grads, loss) = {
        let model = engine.unshard()?;
        let _c = phalanx_core::trace::span("forward+backward", "compute");
        forward_backward(model)?
    };
    engine.step(grads, kind, |params, g| optim.step(params, g))?;
    Ok(loss)
}

/// SHA-256 of every float tensor's value in canonical order ([`param_digest`] of the whole
/// model; gathered a block at a time where the engine shards it: a collective then).
///
/// [`param_digest`]: crate::param_digest
pub(crate) fn digest<M: Classifier, E: DataParallel<M>>(engine: &mut E) -> Result<String> {
    let mut hasher = crate::step::ParamHasher::default();
    engine.for_each_full_param(&mut |values| hasher.update(values))?;
    Ok(hasher.finish())
}

/// The training state this rank holds between steps (ZeRO's accounting, Note [Shard layout]
/// in phalanx-ddp): the parameters it keeps (the model's whole ones and the shard's pieces),
/// the averaged gradients a step holds, the optimizer's state.
pub(crate) fn state_memory<M: Classifier, E: DataParallel<M>>(
    engine: &E,
    optim: &Optim,
) -> Result<StateMemory> {
    let mib = |floats: usize| floats as f64 * 4.0 / (1024.0 * 1024.0);
    let optim_mib = optim
        .state_bytes()
        .map_err(optim_err)?
        .map_or(0.0, |b| b.len() as f64 / (1024.0 * 1024.0));
    let held = engine.held_floats();
    Ok(StateMemory {
        params_mib: mib(held.params),
        grads_mib: mib(held.grads),
        optim_mib,
    })
}

/// Loads the whole optimizer state `bytes` (a checkpoint's, keyed by stable ids): all of it
/// where the engine keeps the parameters whole, this rank's pieces of it where it shards them.
pub(crate) fn load_optim_state<M: Classifier, E: DataParallel<M>>(
    engine: &E,
    optim: &mut Optim,
    bytes: Vec<u8>,
) -> Result<()> {
    let bytes = match engine.shard_view() {
        None => bytes,
        Some(view) => {
            let whole = state::decode(&bytes).map_err(optim_err)?;
            let infos = engine.param_infos();
            let mut mine = Vec::with_capacity(view.pieces.len());
            for (p, range) in view.pieces {
                let id = view.float_positions[*p] as u64 + 1;
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

/// This rank's shard of a sharded checkpoint (Note [Sharded checkpoints]) and the layout the
/// manifest records; `None` where the engine keeps the parameters whole (rank 0 writes the
/// whole model).
pub(crate) fn shard<M: Classifier, E: DataParallel<M>>(
    engine: &E,
    optim: &Optim,
) -> Result<Option<(Shard, Sharded)>> {
    let Some(view) = engine.shard_view() else {
        return Ok(None);
    };
    let rank = engine.process_group().rank();
    let infos = engine.param_infos();
    let values = view.shard.values()?;
    let mut shard = Shard::default();
    let states = match optim.state_bytes().map_err(optim_err)? {
        Some(bytes) => state::decode(&bytes).map_err(optim_err)?,
        None => Default::default(),
    };
    // Under `hybrid` the first shard group writes the pieces; its replicas hold the same.
    let pieces = match view.saves_pieces {
        true => view.pieces,
        false => &[],
    };
    for ((p, _), v) in pieces.iter().zip(values) {
        let name = infos[*p].name.clone();
        let id = view.float_positions[*p] as u64 + 1;
        if let Some(st) = states.get(&id) {
            shard.optim.push((name.clone(), st.clone()));
        }
        shard.tensors.push((name, v));
    }
    // The tensors that are not sharded, whole, from rank 0.
    let all = engine.state_infos();
    let floats: Vec<_> = all.iter().filter(|s| s.kind.is_float()).collect();
    if rank == 0 {
        for (s, v) in floats.iter().zip(params_to_flat(engine.module())?) {
            if s.kind != StateKind::Trainable {
                shard.tensors.push((s.info.name.clone(), v));
            }
        }
    }
    let mut trainable = 0;
    let linear = phalanx_checkpoint::state_dict::torch_transposed(engine.module());
    let layout = floats
        .iter()
        .zip(linear)
        .map(|(s, linear)| {
            let ranges = match s.kind == StateKind::Trainable {
                true => {
                    let r = ranges_of(view.saved_ranges[trainable].clone());
                    trainable += 1;
                    r
                }
                false => Vec::new(),
            };
            LayoutEntry {
                name: s.info.name.clone(),
                shape: s.info.shape.clone(),
                ranges,
                blocks: Vec::new(),
                torch_transposed: Some(linear),
            }
        })
        .collect();
    Ok(Some((
        shard,
        Sharded {
            sharding: view.sharding.to_string(),
            shards: Vec::new(),
            tensors: layout,
        },
    )))
}

/// The whole optimizer state, keyed by stable ids as a checkpoint keeps it: this rank's own
/// where the engine keeps the parameters whole, joined from its group's pieces where it
/// shards them (one all-gather over the engine's group: a collective then; under `hybrid`
/// the first shard group's pieces, which its replicas hold too). `None` before the
/// optimizer's first step.
pub(crate) fn whole_optim_state<M: Classifier, E: DataParallel<M>>(
    engine: &E,
    optim: &Optim,
) -> Result<Option<Vec<u8>>> {
    let Some(view) = engine.shard_view() else {
        return optim.state_bytes().map_err(optim_err);
    };
    // This rank's pieces' states, each with its parameter and range, laid end to end after a
    // header that lists them: (parameter, start, end, encoded length). A rank that cannot
    // read its own sends why (`!` and the words) instead, so that no rank waits for it.
    let mine = (|| -> std::result::Result<Vec<u8>, String> {
        let states = match optim.state_bytes()? {
            Some(b) => state::decode(&b)?,
            None => Default::default(),
        };
        let mut header: Vec<(usize, usize, usize, usize)> = Vec::new();
        let mut body = Vec::new();
        let pieces = match view.saves_pieces {
            true => view.pieces,
            false => &[],
        };
        for (p, range) in pieces.iter().filter(|(_, r)| !r.is_empty()) {
            let id = view.float_positions[*p] as u64 + 1;
            if let Some(st) = states.get(&id) {
                let encoded = state::encode([st])?;
                header.push((*p, range.start, range.end, encoded.len()));
                body.extend(encoded);
            }
        }
        let mut blob = serde_json::to_vec(&header).expect("ranges serialise");
        blob.push(b'\n');
        blob.extend(body);
        Ok(blob)
    })();
    let sent = match &mine {
        Ok(blob) => blob.clone(),
        Err(e) => [b"!".as_slice(), e.as_bytes()].concat(),
    };
    let every = phalanx_pg::all_gather_object(engine.process_group(), &sent)?;
    mine.map_err(optim_err)?;
    let mut by_param: BTreeMap<usize, Vec<(Range<usize>, state::ParamState)>> = BTreeMap::new();
    for (rank, blob) in every.iter().enumerate() {
        let bad = |what: String| optim_err(format!("rank {rank}'s pieces: {what}"));
        if let Some(why) = blob.strip_prefix(b"!") {
            return Err(bad(String::from_utf8_lossy(why).into_owned()));
        }
        let split = blob
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| bad("no header".into()))?;
        let header: Vec<(usize, usize, usize, usize)> =
            serde_json::from_slice(&blob[..split]).map_err(|e| bad(e.to_string()))?;
        let mut at = split + 1;
        for (p, start, end, len) in header {
            let encoded = blob
                .get(at..at + len)
                .ok_or_else(|| bad("the states are short".into()))?;
            at += len;
            let st = state::decode(encoded)
                .map_err(bad)?
                .into_values()
                .next()
                .ok_or_else(|| bad(format!("no state for parameter {p}")))?;
            by_param.entry(p).or_default().push((start..end, st));
        }
    }
    if by_param.is_empty() {
        return Ok(None);
    }
    let infos = engine.param_infos();
    let whole = by_param
        .iter()
        .map(|(&p, pieces)| {
            state::ParamState::join(&infos[p].shape, pieces)
                .map_err(|e| optim_err(format!("parameter {}: {e}", infos[p].name)))
        })
        .collect::<Result<Vec<_>>>()?;
    state::encode(&whole).map(Some).map_err(optim_err)
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
