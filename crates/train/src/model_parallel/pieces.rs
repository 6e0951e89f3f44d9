//! Where this rank's pieces of a model cut across ranks lie in the whole model: what a
//! checkpoint of a cut model writes, and what a resume cuts from a whole checkpoint (Note
//! [Pieces of a cut model] in phalanx-checkpoint).

use std::collections::{BTreeMap, HashMap};

use phalanx_checkpoint::optim_state::{self, ParamState};
use phalanx_checkpoint::sharded::{LayoutEntry, Shard, Sharded, Strided};
use phalanx_ddp::adapter::{StateInfo, StateKind};
use phalanx_tensor_parallel::{shard_range, Placement};

use crate::tensor_parallel::TpPlace;
use crate::{Error, Result};

/// The whole model's float tensors and where this rank's are in them.
#[derive(Debug)]
pub(crate) struct Pieces {
    /// The whole model's float tensors (canonical order): name and shape (Burn's layout).
    whole: Vec<(String, Vec<usize>)>,
    /// Per whole float tensor, whether PyTorch stores it transposed (Note [PyTorch's layout]
    /// in phalanx-checkpoint).
    linear: Vec<bool>,
    /// Per float tensor of this rank's model, in canonical order.
    local: Vec<Piece>,
}

/// One float tensor of this rank's model.
#[derive(Debug)]
struct Piece {
    /// The whole model's tensor it is a piece of.
    of: usize,
    /// The elements of that tensor it holds, in order.
    blocks: Strided,
    /// Its own shape.
    shape: Vec<usize>,
    /// Whether the optimizer steps it.
    trainable: bool,
    /// Whether this rank writes it: the first of the ranks that hold the same elements.
    writes: bool,
    /// Whether this rank is the first of its tensor-parallel group to hold these elements (a
    /// shard's only holder, or a replica's rank 0).
    tp_first: bool,
}

impl Pieces {
    /// `whole`: the whole model's states; `linear`: which of its float tensors PyTorch
    /// stores transposed; `local`: this rank's model's; `positions[i]`: the
    /// whole float tensor that local float tensor `i` comes from (its stage's place in the
    /// pipeline); `tp[i]`: its placement on the tensor-parallel group, if the model is split;
    /// `first_replica`: whether this rank is its data-parallel group's rank 0.
    pub(crate) fn new(
        whole: &[StateInfo],
        linear: Vec<bool>,
        local: &[StateInfo],
        positions: &[usize],
        tp: Option<Vec<TpPlace>>,
        first_replica: bool,
    ) -> Result<Pieces> {
        let whole: Vec<(String, Vec<usize>)> = whole
            .iter()
            .filter(|s| s.kind.is_float())
            .map(|s| (s.info.name.clone(), s.info.shape.clone()))
            .collect();
        let floats: Vec<&StateInfo> = local.iter().filter(|s| s.kind.is_float()).collect();
        let placed = [Some(positions.len()), tp.as_ref().map(Vec::len)];
        if let Some(n) = placed.into_iter().flatten().find(|&n| n != floats.len()) {
            return Err(Error::Config(format!(
                "the model's piece has {} float tensors, its layout places {n}",
                floats.len()
            )));
        }
        let mut pieces = Vec::with_capacity(floats.len());
        for (i, state) in floats.into_iter().enumerate() {
            let of = positions[i];
            let (name, shape) = whole.get(of).ok_or_else(|| {
                Error::Config(format!(
                    "a piece is of tensor {of}; the model has {}",
                    whole.len()
                ))
            })?;
            let numel: usize = shape.iter().product();
            let (blocks, first) = match tp.as_ref().map(|t| t[i]) {
                None => (Strided::whole(numel), true),
                Some(TpPlace {
                    placement: Placement::Replicate,
                    rank,
                    ..
                }) => (Strided::whole(numel), rank == 0),
                Some(TpPlace {
                    placement: Placement::Shard(dim),
                    rank,
                    size,
                }) => {
                    let range = shard_range("a checkpoint's piece", shape[dim], rank, size)?;
                    (Strided::axis(shape, dim, range), true)
                }
            };
            if blocks.numel() != state.info.numel() {
                return Err(Error::Config(format!(
                    "the piece {} of {name} {shape:?} holds {} elements, its layout says {}",
                    state.info.name,
                    state.info.numel(),
                    blocks.numel()
                )));
            }
            pieces.push(Piece {
                of,
                blocks,
                shape: state.info.shape.clone(),
                trainable: matches!(state.kind, StateKind::Trainable),
                writes: first && first_replica,
                tp_first: first,
            });
        }
        Ok(Pieces {
            whole,
            linear,
            local: pieces,
        })
    }

    /// What this rank writes to a checkpoint from its model's float tensors (`values`,
    /// canonical order, Burn's layout) and its optimizer's state, under the whole model's
    /// names and ids; and where each written piece lies (`(whole tensor, blocks)`).
    pub(crate) fn shard(
        &self,
        values: Vec<Vec<f32>>,
        optim: Option<Vec<u8>>,
    ) -> Result<(Shard, Vec<(usize, Strided)>)> {
        let mut states = match optim {
            Some(bytes) => optim_state::decode(&bytes).map_err(optim_err)?,
            None => BTreeMap::new(),
        };
        let mut shard = Shard::default();
        let mut placed = Vec::new();
        for ((i, piece), values) in self.local.iter().enumerate().zip(values) {
            if !piece.writes {
                continue;
            }
            let name = &self.whole[piece.of].0;
            // Local ids are local positions plus one (Note [Stable parameter ids]).
            if let Some(mut state) = states.remove(&(i as u64 + 1)) {
                state.id = piece.of as u64 + 1;
                state.path = Some(name.clone());
                shard.optim.push((name.clone(), state));
            }
            shard.tensors.push((name.clone(), values));
            placed.push((piece.of, piece.blocks));
        }
        Ok((shard, placed))
    }

    /// What this rank writes when its engine shards its piece over the data-parallel group
    /// (`--sharding`): the engine's own checkpoint shard (`shard`, named and placed by the
    /// piece's tensors, `layout`), renamed to the whole model's tensors and placed in them; the
    /// elements of a piece this rank holds (its range of it, `dp_rank`'s) become blocks of the
    /// whole tensor (Note [Pieces of a cut model]).
    pub(crate) fn of_shard(
        &self,
        shard: Shard,
        layout: &Sharded,
        dp_rank: usize,
    ) -> Result<(Shard, Vec<(usize, Strided)>)> {
        let index: HashMap<&str, usize> = layout
            .tensors
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name.as_str(), i))
            .collect();
        let piece_of = |name: &str| -> Result<(usize, &Piece)> {
            let i = *index.get(name).ok_or_else(|| {
                Error::Config(format!(
                    "a checkpoint shard holds {name}, not a tensor of the piece"
                ))
            })?;
            Ok((i, &self.local[i]))
        };
        let mut out = Shard::default();
        let mut placed = Vec::new();
        for (name, values) in shard.tensors {
            let (i, piece) = piece_of(&name)?;
            if !piece.tp_first {
                continue;
            }
            let entry = &layout.tensors[i];
            let range = match entry.ranges.get(dp_rank) {
                Some(&[start, end]) => start..end,
                // Whole in the first data-parallel rank's shard.
                None => 0..piece.blocks.numel(),
            };
            if range.len() != values.len() {
                return Err(Error::Config(format!(
                    "the checkpoint shard holds {} elements of {name}, its layout {}",
                    values.len(),
                    range.len()
                )));
            }
            placed.extend(piece.blocks.sub(range).into_iter().map(|b| (piece.of, b)));
            out.tensors.push((self.whole[piece.of].0.clone(), values));
        }
        for (name, mut state) in shard.optim {
            let (_, piece) = piece_of(&name)?;
            if piece.tp_first {
                let whole = self.whole[piece.of].0.clone();
                state.id = piece.of as u64 + 1;
                state.path = Some(whole.clone());
                out.optim.push((whole, state));
            }
        }
        Ok((out, placed))
    }

    /// The manifest's layout from every rank's placed pieces (`placed[rank]`).
    pub(crate) fn layout(&self, placed: &[Vec<(usize, Strided)>]) -> Vec<LayoutEntry> {
        self.whole
            .iter()
            .enumerate()
            .map(|(w, (name, shape))| LayoutEntry {
                name: name.clone(),
                shape: shape.clone(),
                ranges: Vec::new(),
                torch_transposed: Some(self.linear[w]),
                blocks: placed
                    .iter()
                    .map(|rank| {
                        rank.iter()
                            .filter(|(of, _)| *of == w)
                            .map(|(_, b)| *b)
                            .collect()
                    })
                    .collect(),
            })
            .collect()
    }

    /// This rank's optimizer state cut from the whole model's (`whole`, as any checkpoint
    /// holds it: by the whole model's ids).
    pub(crate) fn cut_state(&self, whole: &[u8]) -> Result<Vec<u8>> {
        let states = optim_state::decode(whole).map_err(optim_err)?;
        let mut mine: Vec<ParamState> = Vec::new();
        for (i, piece) in self.local.iter().enumerate() {
            let Some(state) = states
                .get(&(piece.of as u64 + 1))
                .filter(|_| piece.trainable)
            else {
                continue;
            };
            let numel = self.whole[piece.of].1.iter().product();
            mine.push(
                state
                    .select(numel, &piece.blocks, &piece.shape, i as u64 + 1)
                    .map_err(optim_err)?,
            );
        }
        optim_state::encode(&mine).map_err(optim_err)
    }
}

fn optim_err(e: String) -> Error {
    Error::Config(format!(
        "the optimizer's state of a model cut across ranks: {e}"
    ))
}
