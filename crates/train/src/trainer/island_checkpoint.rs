//! Checkpoints of a run in islands (`phalanx train --outer … --checkpoint-dir`).
//!
//! Note [Island checkpoints]
//! A checkpoint of a run in islands is the usual one, committed by rank 0's record (island
//! 0's model and inner optimizer, and the position: a resume without `--outer`, `phalanx
//! checkpoint consolidate` and every other reader take it as any checkpoint; under a
//! `--sharding` mode inside the islands it is island 0's sharded checkpoint, Note [Sharded
//! checkpoints]), plus one file per rank next to it, `step-N.island-rank-R.safetensors`,
//! which every rank writes before rank 0 commits: its island's model and inner optimizer
//! state, whole ([`IslandState`]: the inner engine keeps an island's ranks equal, and a
//! sharding engine's pieces are gathered over the island first), and its chunk of the outer
//! state (Note [Outer sync] in phalanx-ddp: each fragment's global parameters and momentum,
//! where the schedule stands, and the pseudo-gradient of a sync under way). `--resume` with
//! the same `--outer` flags and world reads them back, the engine cuts the model and the
//! optimizer's state again as it cuts any whole checkpoint's, and the run goes on bitwise
//! as if never stopped; at another layout every rank reads island 0's files instead (Note
//! [A resume at another layout] in phalanx-ddp). A rank file is written whole to a
//! temporary name and renamed, and is only read once its checkpoint's record exists; it is
//! pruned with the checkpoint. Every rank of an island keeps the same island state: `N`
//! copies, so that a rank reads only its own file (no shared filesystem needed).

use std::collections::HashMap;
use std::path::Path;

use phalanx_ddp::adapter::burn as adapter;
use phalanx_ddp::outer::{OuterOptions, OuterSnapshot};
use safetensors::{tensor::TensorView, Dtype, SafeTensors};

use phalanx_ddp::DataParallel;

use crate::{parallel, Classifier, Error, Optim, Result};

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

/// An island's model and inner optimizer state, whole, as every rank's file keeps them.
pub(super) struct IslandState {
    /// Every float tensor, whole, in canonical order.
    floats: Vec<Vec<f32>>,
    /// The int and bool tensors' bytes.
    discrete: Vec<Vec<u8>>,
    /// The inner optimizer's state, keyed by stable ids (`None` before its first step).
    optim: Option<Vec<u8>>,
}

impl IslandState {
    /// What `engine` and `optim` hold, whole: where the engine shards the model over the
    /// island, its parameters and the optimizer's state are gathered from the island's
    /// pieces (a collective of the island then), so that a resume at any layout and under
    /// any `--sharding` cuts them again as a whole checkpoint is cut.
    pub(super) fn of<M: Classifier, E: DataParallel<M>>(
        engine: &mut E,
        optim: &Optim,
    ) -> Result<Self> {
        Ok(IslandState {
            floats: engine.full_params()?,
            discrete: adapter::discrete_to_bytes(engine.module()),
            optim: parallel::whole_optim_state(engine, optim)?,
        })
    }
}

/// Writes rank `rank`'s file (of `world`) of the checkpoint at `step`: its island's state
/// and its chunk of the outer state, with `flags` ([`outer_flags`]); then drops this rank's
/// files of checkpoints older than the kept ones (no collective).
pub(super) fn save(
    dir: &Path,
    (step, rank, world): (u64, usize, usize),
    flags: &str,
    island: &IslandState,
    outer: &OuterSnapshot,
) -> Result<()> {
    let bad = |what: String| Error::Config(format!("writing the island checkpoint: {what}"));
    let IslandState {
        floats,
        discrete,
        optim,
    } = island;
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
    if let Some(state) = optim {
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

/// Where a resuming rank stands in its islands: (its island, its rank in it, the islands'
/// size).
pub(super) type IslandPlace = (usize, usize, usize);

/// What a rank resumes with ([`load`]).
pub(super) struct Resumed<M> {
    /// Its island's model.
    pub(super) model: M,
    /// The inner optimizer's state.
    pub(super) optim: Option<Vec<u8>>,
    /// Its chunk of the outer state.
    pub(super) outer: OuterSnapshot,
    /// Resumed at another layout: from which, in words.
    pub(super) reshaped: Option<String>,
}

/// Reads the checkpoint at `step` back for rank `rank` of `world`, at `place` in its
/// islands: into `model` (its island's model), with the inner optimizer's state and the
/// outer state. The files must have been written with these `flags` ([`outer_flags`]).
/// Written by this layout (world and island size), the rank reads its own file and the run
/// goes on bitwise; written by another, every island starts from island 0's files (Note [A
/// resume at another layout] in phalanx-ddp), and [`Resumed::reshaped`] says from which.
pub(super) fn load<M: Classifier>(
    dir: &Path,
    (step, rank, world): (u64, usize, usize),
    place: IslandPlace,
    flags: &str,
    model: M,
) -> Result<Resumed<M>> {
    let (island, island_rank, size) = place;
    let own = phalanx_checkpoint::island_file(dir, step, rank);
    if own.exists() {
        let file = IslandFile::read(&own, step, flags)?;
        if file.number("world")? == world as u64 && file.number("island_size")? == size as u64 {
            let outer = file.outer()?;
            let (model, optim) = file.model_into(model)?;
            return Ok(Resumed {
                model,
                optim,
                outer,
                reshaped: None,
            });
        }
    }
    // Another layout: island 0's files, the first of which says how large it was.
    let first = IslandFile::read(&phalanx_checkpoint::island_file(dir, step, 0), step, flags)?;
    let (old_world, old_size) = (
        first.number("world")?,
        first.number("island_size")? as usize,
    );
    if (old_world, old_size) == (world as u64, size) {
        // Written at this very layout, yet this rank's own file is missing or another's:
        // taking island 0's state would set this rank apart from its island-mates.
        return Err(Error::Config(format!(
            "--resume under --outer: {}: missing or written at another layout, while the \
             checkpoint of step {step} was written at this one (world {world}, islands of \
             {size}): every rank reads its own file back; start each rank where its file is \
             (or share the checkpoint directory)",
            own.display()
        )));
    }
    let mut chunks = vec![first.outer()?];
    for r in 1..old_size {
        let path = phalanx_checkpoint::island_file(dir, step, r);
        chunks.push(IslandFile::read(&path, step, flags)?.outer()?);
    }
    let outer = OuterSnapshot::reshaped(&chunks, island, (size, island_rank))
        .map_err(|e| first.bad(format!("a resume at another layout: {e}")))?;
    let (model, optim) = first.model_into(model)?;
    let under_way = match &outer.pending {
        Some((f, _)) => format!(
            ", and the sync of fragment {f} that was under way with island 0's pseudo-gradient"
        ),
        None => String::new(),
    };
    let from = format!(
        "{} islands of {old_size} ranks (world {old_world}) -> {} of {size} (world {world}), \
         every island from island 0's model, inner optimizer and outer state{under_way}",
        old_world as usize / old_size.max(1),
        world / size
    );
    Ok(Resumed {
        model,
        optim,
        outer,
        reshaped: Some(from),
    })
}

/// One rank's file of an island checkpoint, read whole, its header checked.
struct IslandFile {
    path: std::path::PathBuf,
    data: Vec<u8>,
    info: HashMap<String, String>,
}

impl IslandFile {
    /// Reads `path`, a file of the checkpoint at `step`, which must have been written with
    /// `flags`.
    fn read(path: &Path, step: u64, flags: &str) -> Result<IslandFile> {
        let bad = |what: String| {
            Error::Config(format!(
                "--resume under --outer: {}: {what}",
                path.display()
            ))
        };
        let data = std::fs::read(path).map_err(|e| {
            bad(format!(
                "{e}: the checkpoint of step {step} holds no such island file: it was written \
                 without --outer, or a resume at another layout reads island 0's files on \
                 every rank and this host does not see them (share the checkpoint directory, \
                 or copy them); without --outer, a resume takes island 0's model alone"
            ))
        })?;
        let (_, header) = SafeTensors::read_metadata(&data).map_err(|e| bad(e.to_string()))?;
        let info = header.metadata().clone().unwrap_or_default();
        let file = IslandFile {
            path: path.to_path_buf(),
            data,
            info,
        };
        if file.field("format")? != FORMAT {
            return Err(file.bad(format!(
                "format {:?}, expected {FORMAT}",
                file.field("format")?
            )));
        }
        let theirs = file.field("flags")?;
        if theirs != flags {
            return Err(file.bad(format!(
                "written with `{theirs}`, this run has `{flags}`: resume with the flags that \
                 wrote it (a sync's schedule and outer optimizer cannot change mid-run)"
            )));
        }
        Ok(file)
    }

    fn bad(&self, what: String) -> Error {
        Error::Config(format!(
            "--resume under --outer: {}: {what}",
            self.path.display()
        ))
    }

    fn field(&self, k: &str) -> Result<String> {
        self.info.get(k).cloned().ok_or_else(|| {
            self.bad(format!(
                "no {k:?} in its header (not a phalanx island file)"
            ))
        })
    }

    fn number(&self, k: &str) -> Result<u64> {
        self.field(k)?
            .parse()
            .map_err(|_| self.bad(format!("{k:?} is not a number")))
    }

    fn tensors(&self) -> Result<SafeTensors<'_>> {
        SafeTensors::deserialize(&self.data).map_err(|e| self.bad(e.to_string()))
    }

    fn f32s(&self, st: &SafeTensors<'_>, name: &str) -> Result<Vec<f32>> {
        let t = st
            .tensor(name)
            .map_err(|e| self.bad(format!("tensor {name}: {e}")))?;
        Ok(bytemuck::pod_collect_to_vec(t.data()))
    }

    /// The island's model, read into `model`, and the inner optimizer's state.
    fn model_into<M: Classifier>(&self, model: M) -> Result<(M, Option<Vec<u8>>)> {
        let st = self.tensors()?;
        let floats = (0..self.number("floats")?)
            .map(|i| self.f32s(&st, &format!("model.{i}")))
            .collect::<Result<Vec<_>>>()?;
        let mut model = adapter::set_params_from_flat(model, &floats)
            .map_err(|e| self.bad(format!("the island's model does not fit this one: {e}")))?;
        let sizes: Vec<usize> = serde_json::from_str(&self.field("discrete")?)
            .map_err(|e| self.bad(format!("\"discrete\": {e}")))?;
        if !sizes.is_empty() {
            let all = st
                .tensor("discrete")
                .map_err(|e| self.bad(format!("tensor discrete: {e}")))?;
            let all = all.data();
            let mut at = 0;
            let parts = sizes
                .iter()
                .map(|&n| {
                    at += n;
                    all.get(at - n..at).map(<[u8]>::to_vec)
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.bad("the discrete tensors are short".into()))?;
            model = adapter::set_discrete_from_bytes(model, parts);
        }
        let optim = st.tensor("optim").ok().map(|t| t.data().to_vec());
        Ok((model, optim))
    }

    /// This rank's chunk of the outer state, as it was written.
    fn outer(&self) -> Result<OuterSnapshot> {
        let st = self.tensors()?;
        let fragments = self.number("fragments")? as usize;
        let pending = match self.field("pending")?.as_str() {
            "none" => None,
            f => Some((
                f.parse()
                    .map_err(|_| self.bad(format!("\"pending\" is {f:?}")))?,
                self.f32s(&st, "outer.pending")?,
            )),
        };
        Ok(OuterSnapshot {
            steps: self.number("steps")?,
            synced_at: self.number("synced_at")?,
            syncs: self.number("syncs")?,
            island: self.number("island")? as usize,
            chunk_of: self.number("chunk_of")? as usize,
            island_size: self.number("island_size")? as usize,
            global: (0..fragments)
                .map(|i| self.f32s(&st, &format!("outer.global.{i}")))
                .collect::<Result<_>>()?,
            momentum: (0..fragments)
                .map(|i| self.f32s(&st, &format!("outer.momentum.{i}")))
                .collect::<Result<_>>()?,
            pending,
        })
    }
}
