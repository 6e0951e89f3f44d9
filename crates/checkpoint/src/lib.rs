//! phalanx-checkpoint: checkpoints between the engines (phalanx-ddp) and the trainers
//! (phalanx-train's `phalanx train`, a user's own loop, the Learner), the role
//! `torch.distributed.checkpoint` plays in PyTorch: whole checkpoints (this file), sharded
//! ones, every rank writing its pieces ([`sharded`]), a module's state dict with the optimizer
//! and the data position ([`state_dict`]), the optimizer's state cut into a rank's pieces and
//! joined again ([`optim_state`]), and where an epoch resumes ([`position`]). A new checkpoint
//! format goes here.
//!
//! Crash-safe checkpoints: tensors in safetensors (loadable by PyTorch's `safetensors.torch`),
//! metadata in JSON.
//!
//! Note [Checkpoint commit]: a checkpoint `step-<N>` is two files. The tensors are written to a
//! temporary file, fsynced and renamed to `step-<N>.safetensors`; then the metadata, which holds
//! the SHA-256 of the tensor file, is written the same way to `step-<N>.json`, and the directory
//! is fsynced. The JSON is the commit record: a kill at any moment leaves either no JSON (the
//! checkpoint never existed; the previous one is the latest) or a complete pair. Loading checks
//! the digest, so a file damaged later (truncated, bit rot, a partial copy) is refused with an
//! error naming it, never loaded as garbage.
//!
//! The optimizer's state (momentum buffers, in Burn's burnpack format) travels in the same
//! tensor file as one `u8` tensor, [`OPTIM_STATE`], so it is committed and checked with the
//! parameters.

#![warn(missing_docs, unreachable_pub)]

use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
};

use safetensors::{tensor::TensorView, Dtype, SafeTensors};

mod directory;
mod error;
mod format;
pub mod optim_state;
pub mod position;
pub mod sharded;
pub mod state_dict;

pub use error::{Error, Mismatch, Result};

use directory::prune;
pub use directory::{island_file, list, record_path, DEFAULT_KEEP};
use format::{bad, io_err, sha256_hex, write_atomic};
pub use format::{Checkpoint, Meta, NamedTensor, FORMAT, OPTIM_STATE};

/// Saves `ck` as `step-<global_step>` in `dir` (see Note [Checkpoint commit]) and keeps the
/// newest `keep` checkpoints. Returns the metadata path.
pub fn save(dir: &Path, ck: &mut Checkpoint, keep: usize) -> Result<PathBuf> {
    fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let stem = format!("step-{:012}", ck.meta.global_step);
    let tensors_path = dir.join(format!("{stem}.safetensors"));
    let mut views: Vec<(String, TensorView<'_>)> = ck
        .tensors
        .iter()
        .map(|t| {
            TensorView::new(Dtype::F32, t.shape.clone(), bytemuck::cast_slice(&t.data))
                .map(|v| (t.name.clone(), v))
                .map_err(|e| bad(&tensors_path, format!("tensor {}: {e}", t.name)))
        })
        .collect::<Result<_>>()?;
    if let Some(state) = &ck.optim_state {
        let view = TensorView::new(Dtype::U8, vec![state.len()], state)
            .map_err(|e| bad(&tensors_path, format!("tensor {OPTIM_STATE}: {e}")))?;
        views.push((OPTIM_STATE.to_string(), view));
    }
    let info = HashMap::from([("format".to_string(), FORMAT.to_string())]);
    let bytes =
        safetensors::serialize(views, Some(info)).map_err(|e| bad(&tensors_path, e.to_string()))?;
    write_atomic(&tensors_path, &bytes)?;
    ck.meta.format = FORMAT.into();
    ck.meta.tensors_sha256 = sha256_hex(&bytes);
    ck.meta.tensors_file = format!("{stem}.safetensors");
    let meta_path = record_path(dir, ck.meta.global_step);
    let json = serde_json::to_vec_pretty(&ck.meta).expect("metadata serialises");
    write_atomic(&meta_path, &json)?;
    prune(dir, keep)?;
    Ok(meta_path)
}

/// Loads and verifies one checkpoint from its metadata path.
pub fn load(meta_path: &Path) -> Result<Checkpoint> {
    let json = fs::read(meta_path).map_err(|e| io_err(meta_path, e))?;
    let meta: Meta = serde_json::from_slice(&json)
        .map_err(|e| bad(meta_path, format!("malformed metadata: {e}")))?;
    if meta.format != FORMAT {
        return Err(bad(
            meta_path,
            format!("format {:?}, expected {FORMAT:?}", meta.format),
        ));
    }
    if meta.sharded.is_some() {
        let dir = meta_path.parent().unwrap_or(Path::new("."));
        return sharded::assemble(dir, meta);
    }
    if meta.tensors_file.contains('/') || meta.tensors_file.contains("..") {
        return Err(bad(
            meta_path,
            format!(
                "tensors_file {:?} must be a plain file name",
                meta.tensors_file
            ),
        ));
    }
    let tpath = meta_path.with_file_name(&meta.tensors_file);
    let bytes = fs::read(&tpath).map_err(|e| io_err(&tpath, e))?;
    let digest = sha256_hex(&bytes);
    if digest != meta.tensors_sha256 {
        return Err(bad(
            &tpath,
            format!(
                "checksum mismatch ({} bytes, sha256 {digest}, metadata says {}): the file is truncated or corrupt",
                bytes.len(),
                meta.tensors_sha256
            ),
        ));
    }
    let st = SafeTensors::deserialize(&bytes).map_err(|e| bad(&tpath, e.to_string()))?;
    let mut tensors = Vec::new();
    let mut optim_state = None;
    for (name, view) in st.tensors() {
        if name == OPTIM_STATE && view.dtype() == Dtype::U8 {
            optim_state = Some(view.data().to_vec());
            continue;
        }
        if view.dtype() != Dtype::F32 {
            return Err(bad(
                &tpath,
                format!("tensor {name} is {:?}, expected F32", view.dtype()),
            ));
        }
        let data: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        tensors.push(NamedTensor {
            name,
            shape: view.shape().to_vec(),
            data,
        });
    }
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Checkpoint {
        meta,
        tensors,
        optim_state,
    })
}

/// Writes the model of a checkpoint (written whole or sharded at any world size, Note
/// [Sharded checkpoints]) as one safetensors file at `out`: every float tensor in PyTorch's
/// layout (Note [PyTorch's layout] in `state_dict.rs`) under PyTorch's name ([`torch_name`]),
/// nothing else, so that `model.load_state_dict(safetensors.torch.load_file(out),
/// strict=True)` takes it for the same architecture. The metadata says which step it holds.
/// Written atomically; returns the step.
pub fn consolidate(ck: &Checkpoint, out: &Path) -> Result<u64> {
    let names: std::collections::HashSet<&str> =
        ck.tensors.iter().map(|t| t.name.as_str()).collect();
    let views = ck
        .tensors
        .iter()
        .map(|t| {
            let name = torch_name(&t.name, &names);
            TensorView::new(Dtype::F32, t.shape.clone(), bytemuck::cast_slice(&t.data))
                .map(|v| (name, v))
                .map_err(|e| bad(out, format!("tensor {}: {e}", t.name)))
        })
        .collect::<Result<Vec<_>>>()?;
    let info = HashMap::from([
        ("format".to_string(), "phalanx-consolidated-v1".to_string()),
        ("global_step".to_string(), ck.meta.global_step.to_string()),
        ("epoch".to_string(), ck.meta.epoch.to_string()),
    ]);
    let bytes = safetensors::serialize(views, Some(info)).map_err(|e| bad(out, e.to_string()))?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| io_err(parent, e))?;
    }
    write_atomic(out, &bytes)?;
    Ok(ck.meta.global_step)
}

/// PyTorch's name for the tensor Burn calls `name` in a model whose tensors are `names`:
/// Burn's norm layers (LayerNorm, BatchNorm, GroupNorm, RmsNorm) call their scale and shift
/// `gamma` and `beta`, PyTorch's `weight` and `bias`; every other name is the same. A module of
/// one's own with a parameter called `gamma` is renamed too, unless its `weight` exists (the
/// name is then kept, so no two tensors take one name).
pub fn torch_name(name: &str, names: &std::collections::HashSet<&str>) -> String {
    let (path, leaf) = name.rsplit_once('.').unwrap_or(("", name));
    let torch = match leaf {
        "gamma" => "weight",
        "beta" => "bias",
        _ => return name.to_string(),
    };
    let renamed = match path.is_empty() {
        true => torch.to_string(),
        false => format!("{path}.{torch}"),
    };
    match names.contains(renamed.as_str()) {
        true => name.to_string(),
        false => renamed,
    }
}

/// A committed checkpoint that does not verify, and why.
#[derive(Debug)]
pub struct Damaged {
    /// Its metadata path.
    pub path: PathBuf,
    /// What fails: the file and the check, named.
    pub error: Error,
}

/// What [`load_newest_intact`] found.
#[derive(Debug)]
pub struct Newest {
    /// The newest checkpoint that verifies; `None` when `dir` holds no checkpoint at all.
    pub checkpoint: Option<Checkpoint>,
    /// The newer ones that did not verify, newest first: skipped.
    pub damaged: Vec<Damaged>,
}

/// The newest committed checkpoint in `dir` that verifies, skipping newer damaged ones (their
/// bytes flipped or truncated after the commit, their metadata missing or malformed) so that
/// a resume loses only the steps since the intact one. A directory whose checkpoints are all
/// damaged is an error naming each, not a silent fresh start.
pub fn load_newest_intact(dir: &Path) -> Result<Newest> {
    let mut damaged = Vec::new();
    for path in list(dir)? {
        match load(&path) {
            Ok(ck) => {
                return Ok(Newest {
                    checkpoint: Some(ck),
                    damaged,
                })
            }
            Err(error) => damaged.push(Damaged { path, error }),
        }
    }
    if damaged.is_empty() {
        return Ok(Newest {
            checkpoint: None,
            damaged,
        });
    }
    let each: Vec<String> = damaged.iter().map(|d| d.error.to_string()).collect();
    Err(bad(
        dir,
        format!(
            "no checkpoint verifies ({} damaged: {}); nothing was resumed or overwritten",
            damaged.len(),
            each.join("; ")
        ),
    ))
}

/// [`load_newest_intact`]'s checkpoint; each skipped damaged one is logged as a warning.
pub fn load_latest(dir: &Path) -> Result<Option<Checkpoint>> {
    let newest = load_newest_intact(dir)?;
    for d in &newest.damaged {
        tracing::warn!("skipping a damaged checkpoint: {}", d.error);
    }
    Ok(newest.checkpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ck(step: u64) -> Checkpoint {
        Checkpoint {
            meta: Meta {
                format: String::new(),
                epoch: 1,
                step_in_epoch: 3,
                global_step: step,
                samples_in_epoch: 384,
                seed: 7,
                world_size: 2,
                batch_size: 64,
                config: HashMap::from([("dataset".into(), "digits".into())]),
                tensors_sha256: String::new(),
                tensors_file: String::new(),
                sharded: None,
                linear_only: true,
            },
            tensors: vec![
                NamedTensor {
                    name: "a.weight".into(),
                    shape: vec![2, 3],
                    data: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.5],
                },
                NamedTensor {
                    name: "b.bias".into(),
                    shape: vec![1],
                    data: vec![-0.25],
                },
            ],
            // Every other checkpoint carries optimizer state (momentum), the others none.
            optim_state: step.is_multiple_of(20).then(|| vec![0, 1, 2, 255, 7]),
        }
    }

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("phalanx-ck-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn round_trip_and_prune() {
        let d = tmpdir("rt");
        for s in [10, 20, 30, 40] {
            save(&d, &mut ck(s), 3).unwrap();
        }
        let names: Vec<_> = list(&d)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            vec![
                "step-000000000040.json",
                "step-000000000030.json",
                "step-000000000020.json"
            ]
        );
        let got = load_latest(&d).unwrap().unwrap();
        let mut want = ck(40);
        want.meta = got.meta.clone();
        assert_eq!(got, want);
        assert_eq!(got.meta.global_step, 40);
        assert_eq!(got.optim_state, Some(vec![0, 1, 2, 255, 7]));
        let older = load(&d.join("step-000000000030.json")).unwrap();
        assert_eq!(older.optim_state, None);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_damaged_newest_checkpoint_is_skipped_naming_the_file_and_the_check() {
        let d = tmpdir("torn");
        save(&d, &mut ck(1), 3).unwrap();
        save(&d, &mut ck(2), 3).unwrap();
        let t = d.join("step-000000000002.safetensors");
        let bytes = fs::read(&t).unwrap();
        fs::write(&t, &bytes[..bytes.len() - 5]).unwrap();
        let n = load_newest_intact(&d).unwrap();
        assert_eq!(n.checkpoint.unwrap().meta.global_step, 1);
        assert_eq!(n.damaged.len(), 1);
        let e = n.damaged[0].error.to_string();
        assert!(
            e.contains("step-000000000002.safetensors") && e.contains("checksum mismatch"),
            "{e}"
        );
        // Flipped bytes of the same length, and malformed metadata, are skipped alike.
        let mut flipped = bytes.clone();
        flipped[bytes.len() / 2] ^= 0xFF;
        fs::write(&t, &flipped).unwrap();
        fs::write(d.join("step-000000000004.json"), b"{not json").unwrap();
        let n = load_newest_intact(&d).unwrap();
        assert_eq!(n.checkpoint.unwrap().meta.global_step, 1);
        let names: Vec<String> = n.damaged.iter().map(|x| x.error.to_string()).collect();
        assert!(
            names[0].contains("step-000000000004.json") && names[0].contains("malformed"),
            "{names:?}"
        );
        assert!(names[1].contains("checksum mismatch"), "{names:?}");
        // A leftover temporary file (a kill mid-write) is ignored.
        fs::write(d.join("step-000000000005.tmp-99"), b"partial").unwrap();
        assert_eq!(load_latest(&d).unwrap().unwrap().meta.global_step, 1);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn every_checkpoint_damaged_is_an_error_naming_each() {
        let d = tmpdir("all-damaged");
        save(&d, &mut ck(1), 3).unwrap();
        save(&d, &mut ck(2), 3).unwrap();
        fs::remove_file(d.join("step-000000000001.safetensors")).unwrap();
        fs::write(d.join("step-000000000002.safetensors"), b"").unwrap();
        let e = load_latest(&d).unwrap_err().to_string();
        assert!(e.contains("no checkpoint verifies (2 damaged"), "{e}");
        assert!(
            e.contains("step-000000000001.safetensors")
                && e.contains("step-000000000002.safetensors"),
            "{e}"
        );
        // Nothing was touched.
        assert!(d.join("step-000000000002.json").exists());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn empty_dir_has_no_checkpoint() {
        assert!(load_latest(&tmpdir("none")).unwrap().is_none());
    }
}
