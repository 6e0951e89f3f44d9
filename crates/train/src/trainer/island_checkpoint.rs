//! Checkpoints of a run in islands (`phalanx train --outer … --checkpoint-dir`).
//!
//! Note [Island checkpoints]
//! A checkpoint of a run in islands is the usual one, written by rank 0 and committed by its
//! record (island 0's model and inner optimizer, and the position: a resume without `--outer`,
//! `phalanx checkpoint consolidate` and every other reader take it as any checkpoint), plus one
//! file per rank next to it, `step-N.island-rank-R.safetensors`, which every rank writes before
//! rank 0 commits: its island's model (the inner engine keeps an island's ranks equal) and
//! inner optimizer state, and its chunk of the outer state (Note [Outer sync] in phalanx-ddp:
//! each fragment's global parameters and momentum, where the schedule stands, and the
//! pseudo-gradient of a sync under way). `--resume` with the same `--outer` flags and world
//! reads them back, and the run goes on bitwise as if never stopped. A rank file is written
//! whole to a temporary name and renamed, and is only read once its checkpoint's record
//! exists; it is pruned with the checkpoint. Every rank of an island keeps the same island
//! state: `N` copies, so that a rank reads only its own file (no shared filesystem needed).

use std::collections::HashMap;
use std::path::Path;

use phalanx_ddp::adapter::burn as adapter;
use phalanx_ddp::outer::{OuterOptions, OuterSnapshot};
use safetensors::{tensor::TensorView, Dtype, SafeTensors};

use crate::{Classifier, Error, Optim, Result};

const FORMAT: &str = "phalanx-island-1";

/// The outer flags a resume must repeat, as a file records them.
pub(super) fn outer_flags(o: &OuterOptions) -> String {
    format!(
        "--outer {} --sync-every {} --outer-lr {} --outer-momentum {} --outer-dtype {} \
         --fragments {} --fragment-delay {} --fragment-alpha {}",
        o.mode,
        o.sync_every,
        o.lr,
        o.momentum,
        o.dtype,
        o.fragments,
        o.fragment_delay,
        o.fragment_alpha
    )
}

/// Writes rank `rank`'s file (of `world`) of the checkpoint at `step`: `model` (its
/// island's), the inner optimizer's state and `outer`, with `flags` ([`outer_flags`]); then
/// drops this rank's files of checkpoints older than the kept ones (no collective).
pub(super) fn save<M: Classifier>(
    dir: &Path,
    (step, rank, world): (u64, usize, usize),
    flags: &str,
    model: &M,
    optim: &Optim,
    outer: &OuterSnapshot,
) -> Result<()> {
    let bad = |what: String| Error::Config(format!("writing the island checkpoint: {what}"));
    let floats = adapter::params_to_flat(model)?;
    let discrete = adapter::discrete_to_bytes(model);
    let optim = optim
        .state_bytes()
        .map_err(|e| bad(format!("the optimizer state: {e}")))?;
    let mut f32s: Vec<(String, &[f32])> = Vec::new();
    for (i, v) in floats.iter().enumerate() {
        f32s.push((format!("model.{i}"), v));
    }
    for (i, (g, m)) in outer.global.iter().zip(&outer.momentum).enumerate() {
        f32s.push((format!("outer.global.{i}"), g));
        f32s.push((format!("outer.momentum.{i}"), m));
    }
    if let Some((_, sent)) = &outer.pending {
        f32s.push(("outer.pending".into(), sent));
    }
    let discrete_bytes = discrete.concat();
    let mut bytes: Vec<(String, &[u8])> = vec![("discrete".into(), &discrete_bytes)];
    if let Some(state) = &optim {
        bytes.push(("optim".into(), state));
    }
    let mut views = Vec::new();
    for (name, v) in &f32s {
        let view = TensorView::new(Dtype::F32, vec![v.len()], bytemuck::cast_slice(v))
            .map_err(|e| bad(format!("tensor {name}: {e}")))?;
        views.push((name.clone(), view));
    }
    for (name, v) in &bytes {
        let view = TensorView::new(Dtype::U8, vec![v.len()], v)
            .map_err(|e| bad(format!("tensor {name}: {e}")))?;
        views.push((name.clone(), view));
    }
    let sizes: Vec<usize> = discrete.iter().map(Vec::len).collect();
    let info = HashMap::from([
        ("format".to_string(), FORMAT.to_string()),
        ("world".to_string(), world.to_string()),
        ("flags".to_string(), flags.to_string()),
        ("floats".to_string(), floats.len().to_string()),
        ("discrete".to_string(), serde_json::json!(sizes).to_string()),
        ("fragments".to_string(), outer.global.len().to_string()),
        ("steps".to_string(), outer.steps.to_string()),
        ("synced_at".to_string(), outer.synced_at.to_string()),
        ("syncs".to_string(), outer.syncs.to_string()),
        ("island".to_string(), outer.island.to_string()),
        ("chunk_of".to_string(), outer.chunk_of.to_string()),
        ("island_size".to_string(), outer.island_size.to_string()),
        (
            "pending".to_string(),
            outer
                .pending
                .as_ref()
                .map_or("none".into(), |(f, _)| f.to_string()),
        ),
    ]);
    let data = safetensors::serialize(views, Some(info)).map_err(|e| bad(e.to_string()))?;
    let path = phalanx_checkpoint::island_file(dir, step, rank);
    let tmp = path.with_extension("safetensors.tmp");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, &data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| bad(format!("{}: {e}", path.display())))?;
    prune_own(dir, rank);
    Ok(())
}

/// Drops this rank's files but the newest few: rank 0 prunes the checkpoints it commits, but
/// a rank on another host (no shared filesystem) sees no record of them.
fn prune_own(dir: &Path, rank: usize) {
    let mine = format!(".island-rank-{rank:05}.safetensors");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("step-") && n.ends_with(&mine))
        })
        .collect();
    files.sort();
    // The kept checkpoints' files, and one more for a checkpoint not yet committed.
    let keep = phalanx_checkpoint::DEFAULT_KEEP + 1;
    for old in files.iter().rev().skip(keep) {
        let _ = std::fs::remove_file(old);
    }
}

/// Reads rank `rank`'s file (of `world`) of the checkpoint at `step` into `model` (its
/// island's model), with the inner optimizer's state and the outer state; the file must have
/// been written by a world of this size with these `flags` ([`outer_flags`]).
pub(super) fn load<M: Classifier>(
    dir: &Path,
    (step, rank, world): (u64, usize, usize),
    flags: &str,
    model: M,
) -> Result<(M, Option<Vec<u8>>, OuterSnapshot)> {
    let path = phalanx_checkpoint::island_file(dir, step, rank);
    let bad = |what: String| {
        Error::Config(format!(
            "--resume under --outer: {}: {what}",
            path.display()
        ))
    };
    let data = std::fs::read(&path).map_err(|e| {
        bad(format!(
            "{e}: the checkpoint of step {step} holds no island state of rank {rank} of \
             {world}: it was written without --outer or by fewer ranks; resume on the world \
             that wrote it (without --outer, a resume takes island 0's model alone)"
        ))
    })?;
    let (_, header) = SafeTensors::read_metadata(&data).map_err(|e| bad(e.to_string()))?;
    let info = header.metadata().clone().unwrap_or_default();
    let field = |k: &str| {
        info.get(k).cloned().ok_or_else(|| {
            bad(format!(
                "no {k:?} in its header (not a phalanx island file)"
            ))
        })
    };
    if field("format")? != FORMAT {
        return Err(bad(format!(
            "format {:?}, expected {FORMAT}",
            field("format")?
        )));
    }
    let wrote = field("world")?;
    if wrote != world.to_string() {
        return Err(bad(format!(
            "written by {wrote} ranks, this run has {world}: resume on {wrote} ranks"
        )));
    }
    let theirs = field("flags")?;
    if theirs != flags {
        return Err(bad(format!(
            "written with `{theirs}`, this run has `{flags}`: resume with the flags that wrote \
             it (a sync's schedule and outer optimizer cannot change mid-run)"
        )));
    }
    let number = |k: &str| -> Result<u64> {
        field(k)?
            .parse()
            .map_err(|_| bad(format!("{k:?} is not a number")))
    };
    let st = SafeTensors::deserialize(&data).map_err(|e| bad(e.to_string()))?;
    let f32s = |name: &str| -> Result<Vec<f32>> {
        let t = st
            .tensor(name)
            .map_err(|e| bad(format!("tensor {name}: {e}")))?;
        Ok(bytemuck::pod_collect_to_vec(t.data()))
    };
    let u8s = |name: &str| -> Result<Vec<u8>> {
        let t = st
            .tensor(name)
            .map_err(|e| bad(format!("tensor {name}: {e}")))?;
        Ok(t.data().to_vec())
    };
    let floats = (0..number("floats")?)
        .map(|i| f32s(&format!("model.{i}")))
        .collect::<Result<Vec<_>>>()?;
    let mut model = adapter::set_params_from_flat(model, &floats)
        .map_err(|e| bad(format!("the island's model does not fit this one: {e}")))?;
    let sizes: Vec<usize> =
        serde_json::from_str(&field("discrete")?).map_err(|e| bad(format!("\"discrete\": {e}")))?;
    if !sizes.is_empty() {
        let all = u8s("discrete")?;
        let mut at = 0;
        let parts = sizes
            .iter()
            .map(|&n| {
                at += n;
                all.get(at - n..at).map(<[u8]>::to_vec)
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("the discrete tensors are short".into()))?;
        model = adapter::set_discrete_from_bytes(model, parts);
    }
    let optim = st.tensor("optim").ok().map(|t| t.data().to_vec());
    let fragments = number("fragments")? as usize;
    let pending = match field("pending")?.as_str() {
        "none" => None,
        f => Some((
            f.parse()
                .map_err(|_| bad(format!("\"pending\" is {f:?}")))?,
            f32s("outer.pending")?,
        )),
    };
    let outer = OuterSnapshot {
        steps: number("steps")?,
        synced_at: number("synced_at")?,
        syncs: number("syncs")?,
        island: number("island")? as usize,
        chunk_of: number("chunk_of")? as usize,
        island_size: number("island_size")? as usize,
        global: (0..fragments)
            .map(|i| f32s(&format!("outer.global.{i}")))
            .collect::<Result<_>>()?,
        momentum: (0..fragments)
            .map(|i| f32s(&format!("outer.momentum.{i}")))
            .collect::<Result<_>>()?,
        pending,
    };
    Ok((model, optim, outer))
}
