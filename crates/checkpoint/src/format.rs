//! What a checkpoint is on disk: the metadata (the commit record), the tensors in PyTorch's
//! layout, a sharded checkpoint's layout, and the crash-safe write and digest every file of
//! one goes through (Note [Checkpoint commit], Note [Sharded checkpoints]). A leaf: writing,
//! listing and loading build on it.

use std::{collections::HashMap, path::Path};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{position::Position, Error, Result};

/// Format tag written in every metadata file.
pub const FORMAT: &str = "phalanx-checkpoint-v1";
/// Name of the `u8` tensor holding the optimizer's state, when it has any.
pub const OPTIM_STATE: &str = "optim.state";

/// A named f32 tensor in PyTorch's layout.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTensor {
    /// Name (`layers.0.weight`, `optim.layers.0.weight.momentum`).
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Row-major values.
    pub data: Vec<f32>,
}

/// Where training stood when the checkpoint was taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Always [`FORMAT`].
    pub format: String,
    /// Epoch in progress (0-based).
    pub epoch: u64,
    /// Steps of that epoch already taken.
    pub step_in_epoch: u64,
    /// Steps taken since the start of training.
    pub global_step: u64,
    /// Samples of that epoch already consumed, over all ranks (the sampler position:
    /// a resume at another world size skips exactly these).
    pub samples_in_epoch: u64,
    /// Training seed (model init and sampler shuffle).
    pub seed: u64,
    /// World size that wrote it.
    pub world_size: u64,
    /// Per-rank batch size.
    pub batch_size: u64,
    /// Free-form facts that must match on resume (dataset, model shape, optimizer).
    pub config: HashMap<String, String>,
    /// SHA-256 of the tensor file.
    pub tensors_sha256: String,
    /// File name of the tensors (empty for a sharded checkpoint).
    pub tensors_file: String,
    /// A sharded checkpoint's shard files and layout (Note [Sharded checkpoints] in
    /// `sharded.rs`); absent for one written whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharded: Option<Sharded>,
    /// Whether only `Linear` weights are transposed into PyTorch's layout (Note [PyTorch's
    /// layout] in `state_dict.rs`); false in checkpoints written before, where every 2-D
    /// tensor was, and which load by that rule.
    #[serde(default)]
    pub linear_only: bool,
}

impl Meta {
    /// Where the run that wrote it stood.
    pub fn position(&self) -> Position {
        Position {
            epoch: self.epoch,
            step_in_epoch: self.step_in_epoch,
            global_step: self.global_step,
            samples_in_epoch: self.samples_in_epoch,
            world: self.world_size,
        }
    }
}

/// A checkpoint in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Metadata.
    pub meta: Meta,
    /// Model parameters.
    pub tensors: Vec<NamedTensor>,
    /// The optimizer's state ([`OPTIM_STATE`]), `None` when it has none (plain SGD).
    pub optim_state: Option<Vec<u8>>,
}

/// What a manifest adds for a sharded checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sharded {
    /// The `--sharding` mode that wrote it.
    pub sharding: String,
    /// One per rank, in rank order.
    pub shards: Vec<ShardFile>,
    /// Every float tensor of the model, in canonical order.
    pub tensors: Vec<LayoutEntry>,
}

/// One rank's file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardFile {
    /// File name, in the manifest's directory.
    pub file: String,
    /// SHA-256 of its bytes.
    pub sha256: String,
}

/// One float tensor of the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayoutEntry {
    /// Module path.
    pub name: String,
    /// Shape in Burn's layout (a `Linear` weight is `[in, out]`).
    pub shape: Vec<usize>,
    /// Per rank, the elements it holds, `[start, end)` of the flattened tensor; empty: the
    /// tensor is whole in rank 0's shard, or placed by `blocks`.
    pub ranges: Vec<[usize; 2]>,
    /// Per rank, the elements of a model cut across ranks that its piece holds, in the piece's
    /// order (Note [Pieces of a cut model] in `sharded.rs`); empty for a rank that wrote none.
    /// Absent (and `ranges` empty) for every other layout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<Vec<Strided>>,
    /// Whether PyTorch stores it transposed (a `Linear`'s weight, Note [PyTorch's layout] in
    /// `state_dict.rs`). Absent in manifests written before it was recorded, where every 2-D
    /// tensor was transposed, and is read so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_transposed: Option<bool>,
}

/// Elements of a flattened tensor in a regular pattern: `count` runs of `len` elements, the
/// first at `start`, each `stride` after the one before. A shard of one axis of a row-major
/// tensor is one: `[rows, cols]` split by columns into `n` is, for rank `r`, `count = rows`
/// runs of `len = cols / n` at `start = r · len`, `stride = cols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Strided {
    /// The first run's first element.
    pub start: usize,
    /// Elements per run.
    pub len: usize,
    /// From one run's start to the next's.
    pub stride: usize,
    /// Runs.
    pub count: usize,
}

impl Strided {
    /// The whole of a tensor of `numel` elements.
    pub fn whole(numel: usize) -> Strided {
        Strided {
            start: 0,
            len: numel,
            stride: numel,
            count: 1,
        }
    }

    /// Range `range` of axis `dim` of a row-major tensor of `shape`.
    pub fn axis(shape: &[usize], dim: usize, range: std::ops::Range<usize>) -> Strided {
        let outer: usize = shape[..dim].iter().product();
        let inner: usize = shape[dim + 1..].iter().product();
        Strided {
            start: range.start * inner,
            len: range.len() * inner,
            stride: shape[dim] * inner,
            count: outer,
        }
    }

    /// Elements it holds.
    pub fn numel(&self) -> usize {
        self.len * self.count
    }

    /// Its runs, in order, as ranges of the flattened tensor.
    pub fn runs(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        (0..self.count).map(|i| {
            let at = self.start + i * self.stride;
            at..at + self.len
        })
    }

    /// Elements `range` of its own order (what a data-parallel shard of a piece holds), as
    /// blocks of the whole tensor, in order: a partial run, whole runs, a partial run.
    pub fn sub(&self, range: std::ops::Range<usize>) -> Vec<Strided> {
        let mut blocks = Vec::new();
        let mut k = range.start;
        while k < range.end.min(self.numel()) {
            let (run, offset) = (k / self.len, k % self.len);
            let at = self.start + run * self.stride + offset;
            let runs = (range.end - k) / self.len;
            if offset == 0 && runs > 0 {
                let count = runs.min(self.count - run);
                blocks.push(Strided {
                    start: at,
                    len: self.len,
                    stride: self.stride,
                    count,
                });
                k += count * self.len;
            } else {
                let len = (self.len - offset).min(range.end - k);
                blocks.push(Strided {
                    start: at,
                    len,
                    stride: len,
                    count: 1,
                });
                k += len;
            }
        }
        blocks
    }

    /// Gathers its elements of `whole` (a flattened tensor), in order.
    pub fn gather(&self, whole: &[f32]) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.numel());
        for run in self.runs() {
            out.extend_from_slice(&whole[run]);
        }
        out
    }
}

pub(super) fn io_err(path: &Path, source: std::io::Error) -> Error {
    Error::Checkpoint {
        path: path.to_path_buf(),
        reason: source.to_string(),
    }
}

pub(super) fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Writes `bytes` to `path` crash-safely (Note [Crash-safe write] in `phalanx_core::file`):
/// temporary file, fsync, rename, directory fsync.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    phalanx_core::file::write_atomic(path, bytes).map_err(|e| io_err(path, e))
}

/// The SHA-256 of `bytes` in hex, as the metadata records it.
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    phalanx_core::hex::encode(&Sha256::digest(bytes))
}

/// Burn stores `Linear` weights `[in, out]`; PyTorch (and checkpoints) `[out, in]`: a 2-D
/// tensor's shape and values in the other layout (the transposition is its own inverse).
pub(crate) fn transposed(shape: &[usize], data: &[f32]) -> (Vec<usize>, Vec<f32>) {
    let (rows, cols) = (shape[0], shape[1]);
    let mut out = vec![0.0; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = data[r * cols + c];
        }
    }
    (vec![cols, rows], out)
}

/// A tensor of Burn's layout in the checkpoint's (PyTorch's) layout: a `Linear`'s weight
/// (`transposed`, Note [PyTorch's layout] in `state_dict.rs`) is `[in, out]` in Burn and
/// `[out, in]` in PyTorch; every other tensor (an `Embedding`'s `[vocab, d]` table among them)
/// is the same in both.
pub(crate) fn to_torch_layout(
    shape: &[usize],
    data: Vec<f32>,
    transposed_in_torch: bool,
) -> (Vec<usize>, Vec<f32>) {
    match transposed_in_torch && shape.len() == 2 {
        true => transposed(shape, &data),
        false => (shape.to_vec(), data),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A column range of a `[rows, cols]` tensor: one run per row, the runs in row order.
    #[test]
    fn an_axis_range_is_one_strided_block() {
        let whole: Vec<f32> = (0..12).map(|v| v as f32).collect(); // [3, 4]
        let cols = Strided::axis(&[3, 4], 1, 2..4);
        assert_eq!(cols.numel(), 6);
        assert_eq!(cols.gather(&whole), vec![2.0, 3.0, 6.0, 7.0, 10.0, 11.0]);
        let rows = Strided::axis(&[3, 4], 0, 1..2);
        assert_eq!(rows.runs().collect::<Vec<_>>(), vec![4..8]);
        assert_eq!(Strided::whole(12).gather(&whole), whole);
    }

    /// Any range of a block's own order is the same elements as the blocks `sub` gives.
    #[test]
    fn a_range_of_a_block_is_the_same_elements_as_its_sub_blocks() {
        let whole: Vec<f32> = (0..60).map(|v| v as f32).collect(); // [5, 12]
        for cols in [0..12, 3..7, 5..6] {
            let block = Strided::axis(&[5, 12], 1, cols);
            let mine = block.gather(&whole);
            for start in 0..=mine.len() {
                for end in start..=mine.len() {
                    let subs = block.sub(start..end);
                    let got: Vec<f32> = subs.iter().flat_map(|b| b.gather(&whole)).collect();
                    assert_eq!(got, mine[start..end], "{block:?} {start}..{end}: {subs:?}");
                }
            }
        }
    }
}
