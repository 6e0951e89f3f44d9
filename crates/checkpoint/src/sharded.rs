//! Sharded checkpoints: every rank writes the elements it owns, one manifest commits them.
//!
//! Note [Sharded checkpoints]
//! Under `--sharding optimizer|grad|full` no rank holds the whole optimizer state (under
//! `full`, not the whole parameters either), so each rank writes its own shard:
//! `step-<N>.shard-<rank>-of-<world>.safetensors` holds its pieces of every trainable
//! parameter (one-dimensional: the elements it owns, a range of the parameter flattened in
//! Burn's layout), their optimizer state (`optim.<name>.<field>`, the same ranges; scalars
//! such as Adam's step count in the file's metadata), and, on rank 0, every tensor that is
//! not sharded (buffers, frozen parameters) whole. Each file is written to a temporary file,
//! fsynced and renamed, then every rank tells rank 0 its SHA-256 (one all-gather), and rank 0
//! writes `step-<N>.json` last, the same way: the commit record, as for a checkpoint written
//! whole (Note [Checkpoint commit]). It lists every shard file with its digest and, for every
//! float tensor of the model in canonical order, its shape and the range each rank holds, so
//! the checkpoint loads at any world size and under any sharding mode: loading checks every
//! digest (a missing or damaged shard is named with its rank, and the checkpoint is skipped
//! for an older one, as a damaged checkpoint written whole is), then joins the pieces into
//! whole tensors (in PyTorch's layout, as [`load`](super::load) returns any checkpoint) and
//! whole optimizer state, which a resumed run cuts into its own shards. `phalanx checkpoint
//! consolidate` writes the joined parameters as one file that `torch.nn.Module.load_state_dict
//! (..., strict=True)` takes. All ranks must see one directory (a shared filesystem across
//! hosts, as PyTorch's distributed checkpoints need).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};

use burn_pack::Scalar;
use phalanx_pg::ProcessGroup;
use safetensors::{tensor::TensorView, Dtype, SafeTensors};

use super::directory::{prune, shard_file_name};
use super::format::{
    bad, io_err, sha256_hex, to_torch_layout, write_atomic, Checkpoint, Meta, NamedTensor, FORMAT,
};
pub use super::format::{LayoutEntry, ShardFile, Sharded, Strided};
use crate::optim_state::{self as state, ParamState};
use crate::Result;

/// What one rank writes: tensors (pieces, and on rank 0 the whole ones) and the optimizer
/// state of its pieces, both by tensor name.
#[derive(Debug, Default)]
pub struct Shard {
    /// `(name, values)`.
    pub tensors: Vec<(String, Vec<f32>)>,
    /// `(name, state)` of the pieces that have optimizer state.
    pub optim: Vec<(String, ParamState)>,
}

/// Saves this rank's `shard` of checkpoint `meta` (whose `sharded` holds the mode and layout)
/// in `dir` and, on rank 0, commits the manifest (Note [Sharded checkpoints]); keeps the
/// newest `keep`. A collective. Returns the manifest's path on rank 0.
pub fn save(
    pg: &ProcessGroup,
    dir: &Path,
    meta: Meta,
    shard: Shard,
    keep: usize,
) -> Result<Option<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let (rank, world) = (pg.rank(), pg.world_size());
    let stem = format!("step-{:012}", meta.global_step);
    let file = shard_file_name(&stem, rank, world);
    let path = dir.join(&file);
    let bytes = serialize(&path, shard)?;
    write_atomic(&path, &bytes)?;
    let digest = sha256_hex(&bytes);
    drop(bytes);
    let record = format!("{file}\n{digest}");
    let all = phalanx_pg::all_gather_object(pg, record.as_bytes())?;
    if rank != 0 {
        return Ok(None);
    }
    let mut meta = meta;
    let shards = all
        .iter()
        .map(|r| {
            let text = String::from_utf8_lossy(r);
            let (file, sha256) = text.split_once('\n').unwrap_or((&text, ""));
            ShardFile {
                file: file.to_string(),
                sha256: sha256.to_string(),
            }
        })
        .collect();
    let sharded = meta
        .sharded
        .as_mut()
        .expect("a sharded checkpoint's meta says how it is sharded");
    sharded.shards = shards;
    meta.format = FORMAT.into();
    meta.tensors_file = String::new();
    meta.tensors_sha256 = String::new();
    let meta_path = dir.join(format!("{stem}.json"));
    let json = serde_json::to_vec_pretty(&meta).expect("metadata serialises");
    write_atomic(&meta_path, &json)?;
    prune(dir, keep)?;
    Ok(Some(meta_path))
}

fn serialize(path: &Path, shard: Shard) -> Result<Vec<u8>> {
    let mut owned: Vec<(String, Vec<f32>)> = shard.tensors;
    let mut fields: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut scalars: BTreeMap<String, BTreeMap<String, Scalar>> = BTreeMap::new();
    let mut ids: BTreeMap<String, u64> = BTreeMap::new();
    let mut paths: BTreeMap<String, String> = BTreeMap::new();
    for (name, st) in shard.optim {
        ids.insert(name.clone(), st.id);
        if let Some(p) = &st.path {
            paths.insert(name.clone(), p.clone());
        }
        scalars.insert(name.clone(), st.scalars.clone());
        let list = fields.entry(name.clone()).or_default();
        for (field, (_, values)) in st.tensors {
            owned.push((format!("optim.{name}.{field}"), values));
            list.push(field);
        }
    }
    let views = owned
        .iter()
        .map(|(name, v)| {
            TensorView::new(Dtype::F32, vec![v.len()], bytemuck::cast_slice(v))
                .map(|t| (name.clone(), t))
                .map_err(|e| bad(path, format!("tensor {name}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let json = |v: serde_json::Value| v.to_string();
    let info = HashMap::from([
        ("format".to_string(), FORMAT.to_string()),
        ("optim.fields".to_string(), json(serde_json::json!(fields))),
        (
            "optim.scalars".to_string(),
            json(serde_json::json!(scalars)),
        ),
        ("optim.ids".to_string(), json(serde_json::json!(ids))),
        ("optim.paths".to_string(), json(serde_json::json!(paths))),
    ]);
    safetensors::serialize(views, Some(info)).map_err(|e| bad(path, e.to_string()))
}

/// One verified shard file, parsed.
struct ShardData {
    bytes: Vec<u8>,
    fields: BTreeMap<String, Vec<String>>,
    scalars: BTreeMap<String, BTreeMap<String, Scalar>>,
    ids: BTreeMap<String, u64>,
    paths: BTreeMap<String, String>,
}

impl ShardData {
    fn read(dir: &Path, rank: usize, entry: &ShardFile) -> Result<ShardData> {
        if entry.file.contains('/') || entry.file.contains("..") {
            return Err(bad(
                dir,
                format!(
                    "shard of rank {rank}: {:?} is not a plain file name",
                    entry.file
                ),
            ));
        }
        let path = dir.join(&entry.file);
        let bytes = std::fs::read(&path).map_err(|e| {
            bad(
                &path,
                format!("the shard of rank {rank} cannot be read: {e}"),
            )
        })?;
        let digest = sha256_hex(&bytes);
        if digest != entry.sha256 {
            return Err(bad(
                &path,
                format!(
                    "the shard of rank {rank} fails its checksum ({} bytes, sha256 {digest}, the \
                     manifest says {}): truncated or corrupt",
                    bytes.len(),
                    entry.sha256
                ),
            ));
        }
        let (_, header) =
            SafeTensors::read_metadata(&bytes).map_err(|e| bad(&path, e.to_string()))?;
        let meta = header.metadata().clone().unwrap_or_default();
        Ok(ShardData {
            fields: parse_meta(&meta, "optim.fields", &path)?,
            scalars: parse_meta(&meta, "optim.scalars", &path)?,
            ids: parse_meta(&meta, "optim.ids", &path)?,
            paths: parse_meta(&meta, "optim.paths", &path)?,
            bytes,
        })
    }

    fn tensor(&self, path: &Path, name: &str, len: usize) -> Result<Vec<f32>> {
        let st = SafeTensors::deserialize(&self.bytes).map_err(|e| bad(path, e.to_string()))?;
        let view = st
            .tensor(name)
            .map_err(|_| bad(path, format!("the shard has no tensor {name}")))?;
        if view.dtype() != Dtype::F32 || view.data().len() != len * 4 {
            return Err(bad(
                path,
                format!(
                    "tensor {name} is {:?} of {} bytes, expected {len} f32",
                    view.dtype(),
                    view.data().len()
                ),
            ));
        }
        Ok(view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("chunks of 4")))
            .collect())
    }

    /// The optimizer state of this shard's piece of `name` (`len` elements), if it has any.
    fn state(&self, path: &Path, name: &str, len: usize) -> Result<Option<ParamState>> {
        let Some(fields) = self.fields.get(name) else {
            return Ok(None);
        };
        let mut tensors = BTreeMap::new();
        for field in fields {
            let values = self.tensor(path, &format!("optim.{name}.{field}"), len)?;
            tensors.insert(field.clone(), (vec![len], values));
        }
        Ok(Some(ParamState {
            id: self.ids.get(name).copied().unwrap_or_default(),
            path: self.paths.get(name).cloned(),
            tensors,
            scalars: self.scalars.get(name).cloned().unwrap_or_default(),
        }))
    }
}

/// The JSON map under `key` in a shard's metadata (empty when absent).
fn parse_meta<T: serde::de::DeserializeOwned + Default>(
    meta: &HashMap<String, String>,
    key: &str,
    path: &Path,
) -> Result<T> {
    match meta.get(key) {
        Some(v) => serde_json::from_str(v).map_err(|e| bad(path, format!("metadata {key}: {e}"))),
        None => Ok(T::default()),
    }
}

/// Verifies every shard of the sharded checkpoint `meta` (in `dir`) and joins them into whole
/// tensors (PyTorch's layout) and whole optimizer state (Note [Sharded checkpoints]).
pub(super) fn assemble(dir: &Path, meta: Meta) -> Result<Checkpoint> {
    let sharded = meta
        .sharded
        .clone()
        .expect("assemble is called for sharded checkpoints");
    let shards = sharded
        .shards
        .iter()
        .enumerate()
        .map(|(rank, entry)| ShardData::read(dir, rank, entry))
        .collect::<Result<Vec<_>>>()?;
    let file = |rank: usize| dir.join(&sharded.shards[rank].file);
    let mut tensors = Vec::with_capacity(sharded.tensors.len());
    let mut states = Vec::new();
    for entry in &sharded.tensors {
        let numel: usize = entry.shape.iter().product();
        let flat = match (entry.ranges.is_empty(), entry.blocks.is_empty()) {
            (true, false) => {
                let (whole, state) = join_blocks(dir, &shards, &file, entry, numel, tensors.len())?;
                states.extend(state);
                whole
            }
            (true, true) => {
                let first = shards
                    .first()
                    .ok_or_else(|| bad(dir, "the manifest lists no shard"))?;
                first.tensor(&file(0), &entry.name, numel)?
            }
            (false, _) => {
                one_per_shard(dir, entry, "ranges", entry.ranges.len(), shards.len())?;
                let mut whole = vec![0f32; numel];
                let mut pieces = Vec::new();
                let mut covered = 0;
                for (rank, &[start, end]) in entry.ranges.iter().enumerate() {
                    if start >= end {
                        continue;
                    }
                    if end > numel {
                        return Err(bad(
                            &file(rank),
                            format!("rank {rank}'s range of {} ends past it", entry.name),
                        ));
                    }
                    let part = shards[rank].tensor(&file(rank), &entry.name, end - start)?;
                    whole[start..end].copy_from_slice(&part);
                    covered += end - start;
                    if let Some(st) = shards[rank].state(&file(rank), &entry.name, end - start)? {
                        pieces.push((start..end, st));
                    }
                }
                all_covered(dir, entry, covered, numel)?;
                if !pieces.is_empty() {
                    let joined = ParamState::join(&entry.shape, &pieces)
                        .map_err(|e| bad(dir, format!("{}: {e}", entry.name)))?;
                    states.push(joined);
                }
                whole
            }
        };
        let linear = entry.torch_transposed.unwrap_or(entry.shape.len() == 2);
        let (shape, data) = to_torch_layout(&entry.shape, flat, linear);
        tensors.push(NamedTensor {
            name: entry.name.clone(),
            shape,
            data,
        });
    }
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    let optim_state = match states.is_empty() {
        true => None,
        false => Some(state::encode(&states).map_err(|e| bad(dir, e))?),
    };
    Ok(Checkpoint {
        meta,
        tensors,
        optim_state,
    })
}

// Note [Pieces of a cut model]
// Under tensor and pipeline parallelism (`--tp`, `--pp`) a rank holds a piece of some of the
// model's tensors: a pipeline stage's tensors whole, a tensor-parallel shard as a range of one
// axis (in Burn's layout, a column-parallel weight's piece is a column range: not contiguous
// once flattened). Such a checkpoint's manifest places each tensor by `blocks`: per rank, the
// [`Strided`] runs of the flattened tensor its piece holds, in the piece's order. The rank's
// file holds the piece flattened under the tensor's name, and its optimizer state the same
// way. Only one copy of each element is written: the data-parallel replicas of a piece, and
// the tensor-parallel ranks that hold a replicated tensor (a LayerNorm's weight) whole, leave
// it to the first of them. Under a sharding mode the data-parallel ranks hold ranges of the
// piece instead, and each writes its own: a range of a piece's order is up to three blocks of
// the whole tensor ([`Strided::sub`]). Loading scatters every piece into the whole tensor, cuts each
// piece's optimizer state into its runs and joins those ([`ParamState::join`]), and checks
// that the pieces tile the tensor exactly once, so a checkpoint of a cut model loads as any
// other: whole, at any layout, under any mode.

/// The tensor of `entry` (`numel` elements, the `position`-th float tensor of the model)
/// from its pieces' blocks, and its optimizer state joined from theirs (Note [Pieces of a cut
/// model]).
fn join_blocks(
    dir: &Path,
    shards: &[ShardData],
    file: &dyn Fn(usize) -> PathBuf,
    entry: &LayoutEntry,
    numel: usize,
    position: usize,
) -> Result<(Vec<f32>, Option<ParamState>)> {
    one_per_shard(dir, entry, "blocks", entry.blocks.len(), shards.len())?;
    let mut whole = vec![0f32; numel];
    let mut seen = vec![false; numel];
    let mut pieces = Vec::new();
    for (rank, blocks) in entry.blocks.iter().enumerate() {
        if blocks.is_empty() {
            continue;
        }
        let len: usize = blocks.iter().map(Strided::numel).sum();
        let part = shards[rank].tensor(&file(rank), &entry.name, len)?;
        let state = shards[rank].state(&file(rank), &entry.name, len)?;
        let mut at = 0;
        for run in blocks.iter().flat_map(Strided::runs) {
            if run.end > numel || seen[run.clone()].iter().any(|&s| s) {
                return Err(bad(
                    &file(rank),
                    format!(
                        "rank {rank}'s piece of {} (elements {}..{}) is outside it or \
                         written twice",
                        entry.name, run.start, run.end
                    ),
                ));
            }
            seen[run.clone()].iter_mut().for_each(|s| *s = true);
            whole[run.clone()].copy_from_slice(&part[at..at + run.len()]);
            if let Some(st) = &state {
                let mut piece = st
                    .slice(len, at..at + run.len())
                    .map_err(|e| bad(&file(rank), format!("{}: {e}", entry.name)))?;
                // The whole model's id of the tensor (Note [Stable parameter ids]).
                piece.id = position as u64 + 1;
                pieces.push((run.clone(), piece));
            }
            at += run.len();
        }
    }
    let covered = seen.iter().filter(|&&s| s).count();
    all_covered(dir, entry, covered, numel)?;
    let state = match pieces.is_empty() {
        true => None,
        false => Some(
            ParamState::join(&entry.shape, &pieces)
                .map_err(|e| bad(dir, format!("{}: {e}", entry.name)))?,
        ),
    };
    Ok((whole, state))
}

/// The shards hold every one of the `numel` elements of `entry`.
fn all_covered(dir: &Path, entry: &LayoutEntry, covered: usize, numel: usize) -> Result<()> {
    match covered == numel {
        true => Ok(()),
        false => Err(bad(
            dir,
            format!(
                "the shards hold {covered} of the {numel} elements of {}",
                entry.name
            ),
        )),
    }
}

/// A manifest's per-rank list of `entry` (`what`: its ranges or blocks) has one item per shard.
fn one_per_shard(
    dir: &Path,
    entry: &LayoutEntry,
    what: &str,
    items: usize,
    shards: usize,
) -> Result<()> {
    match items == shards {
        true => Ok(()),
        false => Err(bad(
            dir,
            format!(
                "tensor {} has {what} for {items} ranks, the manifest {shards} shards",
                entry.name
            ),
        )),
    }
}

/// The ranges of `ranges` (one per rank) as the manifest writes them.
pub fn ranges_of(ranges: impl IntoIterator<Item = Range<usize>>) -> Vec<[usize; 2]> {
    ranges.into_iter().map(|r| [r.start, r.end]).collect()
}
