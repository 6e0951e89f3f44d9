//! A checkpoint directory's file names: which checkpoints it holds, newest first, and
//! dropping the old ones (their tensors, shards and commit record).

use std::{
    fs,
    path::{Path, PathBuf},
};

use super::format::io_err;
use crate::Result;

/// Checkpoints kept by default; older ones are deleted after a new one commits.
pub const DEFAULT_KEEP: usize = 3;

/// The commit record of the checkpoint at `global_step` in `dir` (`step-<N>.json`).
pub fn record_path(dir: &Path, global_step: u64) -> PathBuf {
    dir.join(format!("step-{global_step:012}.json"))
}

/// Committed checkpoints in `dir`, newest first (metadata paths).
pub fn list(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension().is_some_and(|e| e == "json")
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("step-"))
            })
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io_err(dir, e)),
    };
    v.sort();
    v.reverse();
    Ok(v)
}

pub(super) fn prune(dir: &Path, keep: usize) -> Result<()> {
    for old in list(dir)?.into_iter().skip(keep.max(1)) {
        let _ = fs::remove_file(old.with_extension("safetensors"));
        // A sharded checkpoint's shards (Note [Sharded checkpoints]).
        if let (Some(stem), Ok(entries)) = (
            old.file_stem().and_then(|s| s.to_str()).map(str::to_string),
            fs::read_dir(dir),
        ) {
            for e in entries.filter_map(|e| e.ok()) {
                if e.file_name()
                    .to_str()
                    .is_some_and(|n| is_shard_of(n, &stem))
                {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        let _ = fs::remove_file(&old);
    }
    Ok(())
}

/// `step-<N>.shard-<rank>-of-<world>.safetensors`.
pub(super) fn shard_file_name(stem: &str, rank: usize, world: usize) -> String {
    format!("{stem}.shard-{rank:05}-of-{world:05}.safetensors")
}

/// Whether `name` is a shard file of the checkpoint `stem`.
pub(super) fn is_shard_of(name: &str, stem: &str) -> bool {
    name.strip_prefix(stem).is_some_and(|rest| {
        (rest.starts_with(".shard-") || rest.starts_with(".island-"))
            && rest.ends_with(".safetensors")
    })
}

/// The file of rank `rank` next to the checkpoint at `global_step` of a run in islands
/// (`phalanx train --outer`): its island's state and its chunk of the outer state, written
/// before the checkpoint commits and dropped with it.
pub fn island_file(dir: &Path, global_step: u64, rank: usize) -> PathBuf {
    dir.join(format!(
        "step-{global_step:012}.island-rank-{rank:05}.safetensors"
    ))
}
