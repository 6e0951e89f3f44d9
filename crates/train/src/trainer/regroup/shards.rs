//! Re-forming a sharded run's state in a new process group from the pieces its ranks hold
//! (`phalanx launch --fault-tolerance` under `--sharding hybrid`).
//!
//! Note [Regroup of shards]
//! Under `hybrid` each element of the training state lives on one rank of every shard group
//! (Note [Shard layout] in phalanx-ddp): a rank that dies takes its pieces with it, and its
//! replicas in the other groups still hold them (torchft's HSDP case). When the group is
//! re-formed (without the dead rank, or with its replacement: Note [FT generations]), every rank
//! of the new group says which step its state belongs to and which elements of each parameter
//! it holds; a rank one step behind that holds that step's averaged gradients (its commit
//! vote failed where another's completed: Note [Commit vote] in phalanx-ddp) takes the step
//! first; the lowest rank at the newest step that holds an element provides it. One
//! all-gather of the provided values (and one of the optimizer state's, field by field) makes
//! every rank's model and optimizer state whole again, as a resumed checkpoint is: the trainer
//! then shards them over the new group (whose shard groups are the old size when it divides
//! the new world, else the whole new world) and goes on from that step. Buffers, frozen and
//! discrete tensors, whole on every survivor, come from the newest rank by broadcast. An
//! element that no rank alive holds (every replica of a shard lost at once, or no replica at
//! all under `full`, `grad`, `optimizer`) is named with its parameter: the run cannot go on in
//! process, and `--max-restarts` restarts it from the newest sharded checkpoint instead.
//!
//! The regroup is planned first, as pure functions of what the ranks said (`plan.rs`: the step
//! the group goes on from, the source, who provides which elements), then transferred here
//! (the all-gathers of the provided values and of the optimizer state's fields, the broadcast
//! of the rest from the source).

use std::collections::BTreeMap;
use std::ops::Range;

use burn_pack::Scalar;
use phalanx_ddp::adapter::burn::{self as adapter, GradTable};
use phalanx_ddp::adapter::{ParamInfo, StateKind};
use phalanx_ddp::fsdp::LocalShard;
use phalanx_pg::ProcessGroup;

use super::plan::{providers, Steps};
use crate::{Classifier, Error, Optim, Result};
use phalanx_checkpoint::optim_state::{self as state, ParamState};
use phalanx_checkpoint::position::{Handover, Position};

/// Makes every rank's model and optimizer state whole again from the pieces the ranks of `pg`
/// hold (Note [Regroup of shards]). `template` is the model's structure (this rank's local
/// module, or a replacement's freshly built model); `local` what this rank holds (`None`: a
/// replacement); `optim` its optimizer (its pieces' state). Returns the whole model, the
/// position, the rank whose step it is, and the whole optimizer state to cut again. A
/// collective of the new group.
pub(crate) fn resync_sharded<M: Classifier>(
    pg: &ProcessGroup,
    template: &M,
    mut local: Option<&mut LocalShard<M>>,
    optim: &mut Optim,
    held: Option<Position>,
) -> Result<(M, Position, usize, Option<Vec<u8>>)> {
    let (rank, world) = (pg.rank(), pg.world_size());
    let mine = held.map_or(-1, |p| p.global_step as i64);
    let pending = local.as_ref().is_some_and(|l| l.pending.is_some());
    let mut said = vec![0i64; 2 * world];
    pg.allgather(&[mine, pending as i64], &mut said)?;
    let said: Vec<(i64, bool)> = said.chunks(2).map(|s| (s[0], s[1] == 1)).collect();
    let Steps {
        newest,
        after_pending,
        source,
    } = Steps::agree(&said)?;
    if after_pending[rank] != mine {
        let l = local
            .as_mut()
            .expect("a rank with a pending step holds its shard");
        l.commit_pending(|s, g| optim.step(s, g))?;
        tracing::info!(
            step = newest,
            "fault tolerance: took step {newest}, which another rank's commit vote completed"
        );
    }
    let local = local.as_deref();
    // The position comes from the source, a rank whose own step is the newest.
    let holding = after_pending[rank] == newest;
    let position = Handover {
        position: held,
        optim_bytes: None,
    }
    .broadcast(pg, source)?
    .position
    .expect("the source holds a position");
    // The trainable parameters, and where each sits among the float tensors (its stable id).
    let infos: Vec<ParamInfo> = match local {
        Some(l) => l.infos.clone(),
        None => GradTable::new(template).infos().cloned().collect(),
    };
    let states = adapter::state_infos(template);
    let floats: Vec<_> = states.iter().filter(|s| s.kind.is_float()).collect();
    let positions: Vec<usize> = (0..floats.len())
        .filter(|&i| floats[i].kind == StateKind::Trainable)
        .collect();
    let n = infos.len();
    // What each rank holds of each parameter (nothing unless it holds the newest step).
    let pieces: Vec<Option<(Range<usize>, &[f32])>> = (0..n)
        .map(|p| {
            local.filter(|_| holding).and_then(|l| {
                l.pieces
                    .iter()
                    .find(|(q, r, _)| *q == p && !r.is_empty())
                    .map(|(_, r, v)| (r.clone(), v.as_slice()))
            })
        })
        .collect();
    let words: Vec<i64> = pieces
        .iter()
        .flat_map(|h| match h {
            Some((r, _)) => [r.start as i64, r.end as i64],
            None => [0, 0],
        })
        .collect();
    let mut all = vec![0i64; 2 * n * world];
    pg.allgather(&words, &mut all)?;
    let held_by =
        |r: usize, p: usize| all[2 * (r * n + p)] as usize..all[2 * (r * n + p) + 1] as usize;
    let provides = providers(&infos, world, held_by)?;
    // The parameters: one all-gather of every provided element.
    let every_param: Vec<usize> = (0..n).collect();
    let values = gather_provided(pg, &provides, &every_param, |p, range| {
        let (held, v) = pieces[p].as_ref().expect("a rank provides what it holds");
        v[range.start - held.start..range.end - held.start].to_vec()
    })?;
    let mut whole: Vec<Vec<f32>> = infos.iter().map(|i| vec![0.0; i.numel()]).collect();
    scatter(&provides, &every_param, &values, |p, range, v| {
        whole[p][range].copy_from_slice(v)
    });
    // The optimizer state: which fields and scalars each parameter has, from its holders.
    let mine_states: BTreeMap<u64, ParamState> = match (holding, optim.state_bytes()) {
        (true, Ok(Some(bytes))) => state::decode(&bytes).map_err(optim_err)?,
        (_, Err(e)) => return Err(optim_err(e)),
        _ => BTreeMap::new(),
    };
    let id = |p: usize| positions[p] as u64 + 1;
    let shapes_json: BTreeMap<usize, (Vec<String>, BTreeMap<String, Scalar>)> = (0..n)
        .filter_map(|p| {
            let st = mine_states.get(&id(p))?;
            Some((
                p,
                (st.tensors.keys().cloned().collect(), st.scalars.clone()),
            ))
        })
        .collect();
    let every = phalanx_pg::all_gather_object(
        pg,
        serde_json::to_string(&shapes_json)
            .expect("optimizer fields serialise")
            .as_bytes(),
    )?;
    let mut fields: BTreeMap<usize, (Vec<String>, BTreeMap<String, Scalar>)> = BTreeMap::new();
    for bytes in &every {
        let theirs: BTreeMap<usize, (Vec<String>, BTreeMap<String, Scalar>)> =
            serde_json::from_slice(bytes).map_err(|e| optim_err(e.to_string()))?;
        for (p, f) in theirs {
            fields.entry(p).or_insert(f);
        }
    }
    let mut optim_state = None;
    if !fields.is_empty() {
        let order: Vec<(usize, String)> = fields
            .iter()
            .flat_map(|(&p, (names, _))| names.iter().map(move |f| (p, f.clone())))
            .collect();
        let mut joined: BTreeMap<(usize, String), Vec<f32>> = order
            .iter()
            .map(|(p, f)| ((*p, f.clone()), vec![0.0; infos[*p].numel()]))
            .collect();
        for (p, f) in &order {
            let values = gather_provided(pg, &provides, &[*p], |_, range| {
                let (held, _) = pieces[*p].as_ref().expect("a rank provides what it holds");
                let st = &mine_states[&id(*p)].tensors[f].1;
                st[range.start - held.start..range.end - held.start].to_vec()
            })?;
            let out = joined
                .get_mut(&(*p, f.clone()))
                .expect("every field listed");
            scatter(&provides, &[*p], &values, |_, range, v| {
                out[range].copy_from_slice(v)
            });
        }
        let states: Vec<ParamState> = fields
            .iter()
            .map(|(&p, (names, scalars))| {
                let shape = infos[p].shape.clone();
                let mut scalars = scalars.clone();
                scalars.insert("__rank".into(), Scalar::UInt(shape.len() as u64));
                ParamState {
                    id: id(p),
                    path: None,
                    tensors: names
                        .iter()
                        .map(|f| {
                            let v = joined.remove(&(p, f.clone())).expect("joined");
                            (f.clone(), (shape.clone(), v))
                        })
                        .collect(),
                    scalars,
                }
            })
            .collect();
        optim_state = Some(state::encode(&states).map_err(optim_err)?);
    }
    // Buffers, frozen and discrete tensors: whole on the source.
    let others: Vec<usize> = (0..floats.len())
        .filter(|&i| floats[i].kind != StateKind::Trainable)
        .collect();
    let sizes: Vec<usize> = others.iter().map(|&i| floats[i].info.numel()).collect();
    let mut flat: Vec<f32> = match rank == source {
        true => {
            let module = &local.expect("the source holds the state").module;
            adapter::floats_to_flat(module, &others)?.concat()
        }
        false => vec![0.0; sizes.iter().sum()],
    };
    pg.broadcast(&mut flat, source)?;
    let mut discrete: Vec<u8> = match rank == source {
        true => {
            adapter::discrete_to_bytes(&local.expect("the source holds the state").module).concat()
        }
        false => vec![
            0u8;
            adapter::discrete_to_bytes(template)
                .iter()
                .map(Vec::len)
                .sum()
        ],
    };
    if !discrete.is_empty() {
        pg.broadcast(&mut discrete, source)?;
    }
    // Everything arrived: the model, whole.
    let mut values: BTreeMap<String, (Vec<f32>, Vec<usize>)> = BTreeMap::new();
    for (p, v) in whole.into_iter().enumerate() {
        values.insert(infos[p].name.clone(), (v, infos[p].shape.clone()));
    }
    let mut at = 0;
    for (&i, &len) in others.iter().zip(&sizes) {
        let info = &floats[i].info;
        values.insert(
            info.name.clone(),
            (flat[at..at + len].to_vec(), info.shape.clone()),
        );
        at += len;
    }
    let by_name = values
        .iter()
        .map(|(k, (v, s))| (k.clone(), (v.as_slice(), s.as_slice())))
        .collect();
    let mut model = adapter::set_floats_shaped(template.clone(), by_name);
    if !discrete.is_empty() {
        let lens: Vec<usize> = adapter::discrete_to_bytes(&model)
            .iter()
            .map(Vec::len)
            .collect();
        let mut at = 0;
        let bytes = lens
            .iter()
            .map(|&l| {
                at += l;
                discrete[at - l..at].to_vec()
            })
            .collect();
        model = adapter::set_discrete_from_bytes(model, bytes);
    }
    Ok((model, position, source, optim_state))
}

/// A whole model of `local`'s structure, for a rank that takes a peer's state: its module
/// with every trainable tensor at its whole shape (zeros: under `full` the module holds them
/// empty between steps).
pub(crate) fn whole_template<M: Classifier>(local: &LocalShard<M>) -> M {
    let zeros: Vec<Vec<f32>> = local.infos.iter().map(|i| vec![0.0; i.numel()]).collect();
    let values = local
        .infos
        .iter()
        .zip(&zeros)
        .map(|(i, z)| (i.name.clone(), (z.as_slice(), i.shape.as_slice())))
        .collect();
    adapter::set_floats_shaped(local.module.clone(), values)
}

/// Every rank's provided elements of parameters `params`, by one all-gather: rank by rank,
/// then parameter by parameter, range by range.
fn gather_provided(
    pg: &ProcessGroup,
    provides: &[Vec<Vec<Range<usize>>>],
    params: &[usize],
    mut values_of: impl FnMut(usize, &Range<usize>) -> Vec<f32>,
) -> Result<Vec<f32>> {
    let mut mine = Vec::new();
    for &p in params {
        for range in &provides[pg.rank()][p] {
            mine.extend(values_of(p, range));
        }
    }
    let counts: Vec<usize> = provides
        .iter()
        .map(|r| params.iter().flat_map(|&p| &r[p]).map(Range::len).sum())
        .collect();
    let mut all = vec![0f32; counts.iter().sum()];
    pg.allgather_v(&mine, &mut all, &counts)?;
    Ok(all)
}

/// Lays [`gather_provided`]'s values out again.
fn scatter(
    provides: &[Vec<Vec<Range<usize>>>],
    params: &[usize],
    values: &[f32],
    mut put: impl FnMut(usize, Range<usize>, &[f32]),
) {
    let mut at = 0;
    for rank in provides {
        for &p in params {
            for range in &rank[p] {
                put(p, range.clone(), &values[at..at + range.len()]);
                at += range.len();
            }
        }
    }
}

fn optim_err(e: String) -> Error {
    Error::Config(format!("fault tolerance: the optimizer's state: {e}"))
}
