//! A user's own loop: a Burn module and its optimizer to a checkpoint and back, one call each
//! way (`torch.distributed.checkpoint`'s `save` and `load` of a model's and an optimizer's
//! state dict).
//!
//! [`save`] writes every float tensor of the module (trainable and frozen parameters,
//! BatchNorm's running statistics), the optimizer's state (momentum, Adam's moments and step
//! counts) and where the loop stands ([`Position`]: epoch, steps, the sampler's position and
//! the world size that consumed it) as one checkpoint of `phalanx train`'s format, committed
//! the same crash-safe way (Note [Checkpoint commit]). [`load`] takes the newest checkpoint
//! that verifies and loads it into the module and the optimizer the program built, in place; a
//! checkpoint that does not fit them is refused with [`Error::Mismatch`] naming the
//! file and the tensor (missing, unexpected, another shape), and neither is touched.
//!
//! Note [Optimizer state by position]: Burn's optimizer keys its state by `ParamId`, random
//! per process. [`save`] rewrites each key to the parameter's position in canonical order
//! plus one (the ids `phalanx train`'s models carry: Note [Stable parameter ids]) and [`load`]
//! rewrites them back to the ids of the module it loads into, so a user's loop needs no stable
//! ids of its own, and a checkpoint of `phalanx train` and one of a user's loop are one
//! format.
//!
//! The checkpoint is whole, so it resumes at any world size: under DDP every rank loads it
//! (one host or a shared filesystem; DDP's construction then broadcasts rank 0's values), and
//! [`position::epoch_indices`](crate::position::epoch_indices) gives each rank the rest of a
//! mid-epoch sampler position at its new world size. [`load`] also reads a sharded checkpoint
//! of `phalanx train --sharding` (joined whole on the way in). Under DDP only one rank saves.
//!
//! ```
//! use burn::module::{Module, ModuleVisitor, Param};
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::{AdamConfig, GradientsParams};
//! use burn::tensor::{Device, Tensor};
//! use phalanx_checkpoint::position::Position;
//! use phalanx_checkpoint::state_dict;
//!
//! #[derive(Module, Debug)]
//! struct Net { fc: Linear }
//!
//! let device = Device::flex().autodiff();
//! let dir = std::env::temp_dir().join(format!("state-dict-doc-{}", std::process::id()));
//! let mut net = Net { fc: LinearConfig::new(4, 2).init(&device) };
//! let mut optim = AdamConfig::new().init();
//! let loss = net.fc.forward(Tensor::<2>::ones([3, 4], &device)).sum();
//! let grads = GradientsParams::from_grads(loss.backward(), &net);
//! net = optim.step(1e-3, net, grads);
//! let at = Position { epoch: 1, global_step: 1, world: 1, ..Position::default() };
//! state_dict::save(&dir, &net, &optim, at)?;
//!
//! // The next run: a fresh module and optimizer, then the checkpoint, if there is one.
//! let mut fresh = Net { fc: LinearConfig::new(4, 2).init(&device) };
//! let mut fresh_optim = AdamConfig::new().init();
//! let resumed = state_dict::load(&dir, &mut fresh, &mut fresh_optim)?.expect("saved above");
//! assert_eq!(resumed.position, at);
//! assert_eq!(fresh.fc.weight.val().into_data(), net.fc.weight.val().into_data());
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), phalanx_checkpoint::Error>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{ModuleOptimizer, OptimizerRecord};
use burn::tensor::{Bytes, Tensor};
use phalanx_ddp::adapter::burn as adapter;

use super::directory::{record_path, DEFAULT_KEEP};
use super::format::{to_torch_layout, transposed, Checkpoint, Meta, NamedTensor};
use crate::error::Mismatch;
use crate::optim_state as state;
use crate::position::Position;
use crate::{Error, Result};

/// Where the loop that saved a checkpoint stood, as [`load`] found it.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    /// Epoch, steps, the sampler's position and the world size that consumed it.
    pub position: Position,
    /// The checkpoint's commit record (`step-<N>.json`).
    pub path: PathBuf,
}

/// Saves `module`, `optim`'s state and `at` as checkpoint `step-<at.global_step>` in `dir`,
/// crash-safe (Note [Checkpoint commit]), and keeps the newest
/// [`DEFAULT_KEEP`]. Returns the commit record's path. Under DDP, call it
/// on one rank (the replicas are equal).
pub fn save<M: Module>(
    dir: &Path,
    module: &M,
    optim: &ModuleOptimizer,
    at: Position,
) -> Result<PathBuf> {
    let meta = Meta {
        format: String::new(),
        epoch: at.epoch,
        step_in_epoch: at.step_in_epoch,
        global_step: at.global_step,
        samples_in_epoch: at.samples_in_epoch,
        seed: 0,
        world_size: at.world,
        batch_size: 0,
        config: HashMap::new(),
        tensors_sha256: String::new(),
        tensors_file: String::new(),
        sharded: None,
        linear_only: true,
    };
    let ids = float_param_ids(module);
    let optim_state = optim_state_by_position(optim, &ids)
        .map_err(|e| Error::OptimizerState(format!("saving the optimizer's state: {e}")))?;
    let mut ck = Checkpoint {
        meta,
        tensors: module_tensors(module)?,
        optim_state,
    };
    super::save(dir, &mut ck, DEFAULT_KEEP)
}

/// Loads the newest checkpoint in `dir` that verifies (Note [Checkpoint commit]; newer
/// damaged ones are skipped with a warning) into `module` and `optim`, in place, as
/// `torch.distributed.checkpoint.load` does; `None`, and both untouched, when `dir` holds
/// none. A checkpoint that does not fit leaves both untouched too.
pub fn load<M: Module>(
    dir: &Path,
    module: &mut M,
    optim: &mut ModuleOptimizer,
) -> Result<Option<Resumed>> {
    let newest = super::load_newest_intact(dir)?;
    for d in &newest.damaged {
        tracing::warn!("skipping a damaged checkpoint: {}", d.error);
    }
    let Some(ck) = newest.checkpoint else {
        return Ok(None);
    };
    let path = record_path(dir, ck.meta.global_step);
    apply(&path, &ck, module, optim).map(Some)
}

/// Loads the checkpoint whose commit record is `path` into `module` and `optim`, in place.
pub fn load_from<M: Module>(
    path: &Path,
    module: &mut M,
    optim: &mut ModuleOptimizer,
) -> Result<Resumed> {
    let ck = super::load(path)?;
    apply(path, &ck, module, optim)
}

fn apply<M: Module>(
    path: &Path,
    ck: &Checkpoint,
    module: &mut M,
    optim: &mut ModuleOptimizer,
) -> Result<Resumed> {
    let ids = float_param_ids(module);
    // Both built before either is set, so that a mismatch leaves both as they were. Burn's
    // clones share the tensors' storage: nothing is copied.
    let loaded = load_module(module.clone(), ck, path)?;
    let record = match &ck.optim_state {
        Some(bytes) => {
            let bytes = optim_state_by_id(bytes, &ids).map_err(|e| mismatch(path, e))?;
            Some(
                OptimizerRecord::from_bytes(Bytes::from_bytes_vec(bytes))
                    .map_err(|e| mismatch(path, Mismatch::OptimizerState(e.to_string())))?,
            )
        }
        None => None,
    };
    *module = loaded;
    if let Some(record) = record {
        *optim = optim.clone().load_record(record);
    }
    Ok(Resumed {
        position: ck.meta.position(),
        path: path.to_path_buf(),
    })
}

fn mismatch(path: &Path, mismatch: Mismatch) -> Error {
    Error::Mismatch {
        path: path.to_path_buf(),
        mismatch,
    }
}

/// Every float tensor of `module` in canonical order, in the checkpoint's (PyTorch's) layout:
/// what a checkpoint of it holds, `phalanx train`'s and a user's loop's alike.
pub fn module_tensors<M: Module>(module: &M) -> Result<Vec<NamedTensor>> {
    let infos = adapter::param_infos(module);
    let values = adapter::params_to_flat(module)?;
    let linear = torch_transposed(module);
    Ok(infos
        .into_iter()
        .zip(values)
        .zip(linear)
        .map(|((info, data), linear)| {
            let (shape, data) = to_torch_layout(&info.shape, data, linear);
            NamedTensor {
                name: info.name,
                shape,
                data,
            }
        })
        .collect())
}

/// `module` with every float tensor taken from `ck` (whose commit record is `path`), by name,
/// strictly: a tensor of the module missing from the checkpoint, one of the checkpoint the
/// module lacks, or another shape is refused, naming it, before anything is set.
pub fn load_module<M: Module>(module: M, ck: &Checkpoint, path: &Path) -> Result<M> {
    let infos = adapter::param_infos(&module);
    let linear = match ck.meta.linear_only {
        true => torch_transposed(&module),
        // Written before the rule: every 2-D tensor was transposed (Note [PyTorch's layout]).
        false => vec![true; infos.len()],
    };
    let by_name: HashMap<&str, &NamedTensor> =
        ck.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut values = Vec::with_capacity(infos.len());
    for (info, &linear) in infos.iter().zip(&linear) {
        let want = match linear && info.shape.len() == 2 {
            true => vec![info.shape[1], info.shape[0]],
            false => info.shape.clone(),
        };
        let Some(t) = by_name.get(info.name.as_str()) else {
            return Err(mismatch(
                path,
                Mismatch::Missing {
                    name: info.name.clone(),
                    shape: want,
                },
            ));
        };
        if t.shape != want || t.data.len() != info.numel() {
            return Err(mismatch(
                path,
                Mismatch::Shape {
                    name: info.name.clone(),
                    checkpoint: t.shape.clone(),
                    model: want,
                },
            ));
        }
        values.push(match linear && info.shape.len() == 2 {
            true => transposed(&t.shape, &t.data).1,
            false => t.data.clone(),
        });
    }
    if let Some(extra) = ck
        .tensors
        .iter()
        .find(|t| !infos.iter().any(|i| i.name == t.name))
    {
        return Err(mismatch(
            path,
            Mismatch::Unexpected {
                name: extra.name.clone(),
                shape: extra.shape.clone(),
            },
        ));
    }
    Ok(adapter::set_params_from_flat(module, &values)?)
}

// Note [PyTorch's layout]
// A checkpoint holds every tensor as PyTorch holds it, so that `load_state_dict` takes it. The
// one difference in layout between the two frameworks is `Linear`'s weight: `[in, out]` in
// Burn, `[out, in]` in PyTorch. An `Embedding`'s table is `[num_embeddings, dim]` in both, and
// a convolution's kernel is the same too. So the rule is by module, not by shape: a float
// tensor is transposed when it is the `weight` of a `burn::nn::Linear` (the module type the
// `Module` derive reports while visiting it, as Burn's own PyTorch adapter in burn-store
// decides), and no other. Checkpoints written before the rule transposed every 2-D tensor
// (the GPT's embeddings, the row transformer's position `Embedding`): a checkpoint says which
// rule wrote it (`Meta::linear_only`, and per tensor in a sharded manifest), and loads by that
// rule, so older checkpoints resume as before.

/// Per float tensor of `module` (canonical order), whether PyTorch stores it transposed: a
/// `Linear`'s weight (Note [PyTorch's layout]).
pub fn torch_transposed<M: Module>(module: &M) -> Vec<bool> {
    let mut linear = LinearWeights {
        stack: Vec::new(),
        found: Vec::new(),
    };
    module.visit(&mut linear);
    linear.found
}

struct LinearWeights {
    /// The fields entered, each with the type of the module that holds it.
    stack: Vec<(String, String)>,
    found: Vec<bool>,
}

impl ModuleVisitor for LinearWeights {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.stack
            .push((name.to_string(), container_type.to_string()));
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.stack.pop();
    }

    fn visit_float<const D: usize>(&mut self, _param: &Param<Tensor<D>>) {
        let linear = self
            .stack
            .last()
            .is_some_and(|(field, holder)| field == "weight" && holder == "Struct:Linear");
        self.found.push(linear);
    }
}

/// `optim`'s state with each parameter's id replaced by its position among `ids` (the module's
/// float parameters in canonical order) plus one (Note [Optimizer state by position]); `None`
/// when it has none.
fn optim_state_by_position(
    optim: &ModuleOptimizer,
    ids: &[u64],
) -> std::result::Result<Option<Vec<u8>>, String> {
    let record = optim.to_record();
    if record.is_empty() {
        return Ok(None);
    }
    let bytes = record.into_bytes().map_err(|e| e.to_string())?;
    let position: HashMap<u64, u64> = ids
        .iter()
        .enumerate()
        .map(|(p, &id)| (id, p as u64 + 1))
        .collect();
    let mut states = state::decode(&bytes)?;
    for st in states.values_mut() {
        st.id = *position.get(&st.id).ok_or_else(|| {
            format!(
                "it holds state for parameter id {} that is not one of the module's",
                st.id
            )
        })?;
    }
    state::encode(states.values()).map(Some)
}

/// A checkpoint's optimizer state, keyed by position, rekeyed to the ids of the module whose
/// float parameters, in canonical order, have `ids`.
fn optim_state_by_id(bytes: &[u8], ids: &[u64]) -> std::result::Result<Vec<u8>, Mismatch> {
    let states = state::decode(bytes).map_err(Mismatch::OptimizerState)?;
    let mut rekeyed = BTreeMap::new();
    for (position, mut st) in states {
        let id = usize::try_from(position)
            .ok()
            .and_then(|p| p.checked_sub(1))
            .and_then(|p| ids.get(p))
            .ok_or_else(|| {
                Mismatch::OptimizerState(format!(
                    "it holds state for parameter {position} (by position), the module has {}",
                    ids.len()
                ))
            })?;
        st.id = *id;
        rekeyed.insert(*id, st);
    }
    state::encode(rekeyed.values()).map_err(Mismatch::OptimizerState)
}

/// The ids of `module`'s float parameters (buffers included) in canonical order: the ids that
/// key its optimizer's state (stable ones where a trainer numbers them, Note [Stable parameter
/// ids] in phalanx-train).
pub fn float_param_ids<M: Module>(module: &M) -> Vec<u64> {
    let mut ids = ParamIds(Vec::new());
    module.visit(&mut ids);
    ids.0
}

struct ParamIds(Vec<u64>);

impl ModuleVisitor for ParamIds {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push(param.id.val());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::Param;
    use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
    use burn::optim::{AdamConfig, GradientsParams};
    use burn::tensor::{Device, Tensor, TensorData};

    #[derive(Module, Debug)]
    struct Net {
        fc: Linear,
        bn: BatchNorm,
        out: Linear,
    }

    fn net(width: usize, device: &Device) -> Net {
        Net {
            fc: LinearConfig::new(3, width).init(device),
            bn: BatchNormConfig::new(width).init(device),
            out: LinearConfig::new(width, 2).init(device),
        }
    }

    fn forward(n: &Net, x: Tensor<2>) -> Tensor<2> {
        let h = n.bn.forward(n.fc.forward(x).unsqueeze_dim::<3>(2));
        n.out.forward(h.squeeze_dim::<2>(2))
    }

    /// Two Adam steps: moments and step counts non-zero, running statistics moved.
    fn trained(device: &Device) -> (Net, ModuleOptimizer) {
        let mut n = net(5, device);
        let mut optim = AdamConfig::new().with_epsilon(1e-8).init();
        for step in 0..2 {
            let x = Tensor::from_data(
                TensorData::new((0..12).map(|i| (i + step) as f32 * 0.1).collect(), [4, 3]),
                device,
            );
            let loss = forward(&n, x).powf_scalar(2.0).mean();
            let grads = GradientsParams::from_grads(loss.backward(), &n);
            n = optim.step(1e-2, n, grads);
        }
        (n, optim)
    }

    fn bits(values: &[Vec<f32>]) -> Vec<Vec<u32>> {
        values
            .iter()
            .map(|v| v.iter().map(|x| x.to_bits()).collect())
            .collect()
    }

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("phalanx-sd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[derive(Module, Debug)]
    struct Lm {
        wte: burn::nn::Embedding,
        fc: Linear,
        ln: burn::nn::LayerNorm,
    }

    /// Only a `Linear`'s weight is transposed for PyTorch: an `Embedding`'s table is
    /// `[vocab, d]` in both frameworks (Note [PyTorch's layout]).
    #[test]
    fn a_linear_weight_is_transposed_and_an_embedding_table_is_not() {
        let device = Device::flex();
        let lm = Lm {
            wte: burn::nn::EmbeddingConfig::new(11, 4).init(&device),
            fc: LinearConfig::new(4, 3).init(&device),
            ln: burn::nn::LayerNormConfig::new(3).init(&device),
        };
        assert_eq!(
            torch_transposed(&lm),
            vec![false, true, false, false, false]
        );
        let shapes: Vec<(String, Vec<usize>)> = module_tensors(&lm)
            .unwrap()
            .into_iter()
            .map(|t| (t.name, t.shape))
            .collect();
        assert_eq!(shapes[0], ("wte.weight".into(), vec![11, 4]));
        assert_eq!(shapes[1], ("fc.weight".into(), vec![3, 4]));
    }

    /// A checkpoint written before the rule (every 2-D tensor transposed, the embedding's table
    /// too) loads by its own rule into the same values.
    #[test]
    fn a_checkpoint_of_the_older_rule_loads_as_it_was_written() {
        let device = Device::flex();
        let lm = || Lm {
            wte: burn::nn::EmbeddingConfig::new(11, 4).init(&device),
            fc: LinearConfig::new(4, 3).init(&device),
            ln: burn::nn::LayerNormConfig::new(3).init(&device),
        };
        let (written, fresh) = (lm(), lm());
        let tensors = module_tensors(&written)
            .unwrap()
            .into_iter()
            .map(|t| match t.name.as_str() {
                "wte.weight" => {
                    let (shape, data) = transposed(&t.shape, &t.data);
                    NamedTensor { shape, data, ..t }
                }
                _ => t,
            })
            .collect();
        let meta = Meta {
            format: String::new(),
            epoch: 0,
            step_in_epoch: 0,
            global_step: 0,
            samples_in_epoch: 0,
            seed: 0,
            world_size: 1,
            batch_size: 0,
            config: HashMap::new(),
            tensors_sha256: String::new(),
            tensors_file: String::new(),
            sharded: None,
            linear_only: false,
        };
        let ck = Checkpoint {
            meta,
            tensors,
            optim_state: None,
        };
        let loaded = load_module(fresh, &ck, Path::new("old.json")).unwrap();
        assert_eq!(
            adapter::params_to_flat(&loaded).unwrap(),
            adapter::params_to_flat(&written).unwrap()
        );
    }

    #[test]
    fn save_then_load_is_bitwise_module_and_adam_state() {
        let device = Device::flex().autodiff();
        let (n, optim) = trained(&device);
        let d = tmpdir("rt");
        let at = Position {
            epoch: 3,
            step_in_epoch: 2,
            global_step: 17,
            samples_in_epoch: 128,
            world: 4,
        };
        let path = save(&d, &n, &optim, at).unwrap();
        // A fresh module (other random ids, other values) and a fresh optimizer.
        let mut fresh = net(5, &device);
        let mut fresh_optim = AdamConfig::new().with_epsilon(1e-8).init();
        assert_ne!(
            float_param_ids(&fresh),
            float_param_ids(&n),
            "the test needs other ids"
        );
        let got = load(&d, &mut fresh, &mut fresh_optim).unwrap().unwrap();
        assert_eq!(got.path, path);
        assert_eq!(got.position, at);
        assert_eq!(
            bits(&adapter::params_to_flat(&fresh).unwrap()),
            bits(&adapter::params_to_flat(&n).unwrap()),
            "parameters and running statistics"
        );
        // Adam's state, rekeyed to the fresh ids: the same moments and step counts, field by
        // field, under the positions both modules share.
        let by_position = |m: &Net, o: &ModuleOptimizer| {
            let ids = float_param_ids(m);
            let bytes = optim_state_by_position(o, &ids).unwrap().unwrap();
            state::decode(&bytes).unwrap()
        };
        let (want, have) = (by_position(&n, &optim), by_position(&fresh, &fresh_optim));
        // fc, bn (gamma, beta) and out: 6 parameters at positions 1-4, 7, 8 (5 and 6 are bn's
        // running statistics, buffers without state).
        assert_eq!(want.keys().copied().collect::<Vec<_>>(), [1, 2, 3, 4, 7, 8]);
        assert_eq!(have, want);
        // And the next step is the same step, bitwise.
        let x = Tensor::from_data(TensorData::new(vec![0.3f32; 12], [4, 3]), &device);
        let step = |m: Net, mut o: ModuleOptimizer| {
            let loss = forward(&m, x.clone()).powf_scalar(2.0).mean();
            let grads = GradientsParams::from_grads(loss.backward(), &m);
            adapter::params_to_flat(&o.step(1e-2, m, grads)).unwrap()
        };
        assert_eq!(bits(&step(fresh, fresh_optim)), bits(&step(n, optim)));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_checkpoint_that_does_not_fit_is_named_with_the_tensor() {
        let device = Device::flex().autodiff();
        let (n, optim) = trained(&device);
        let d = tmpdir("mismatch");
        let path = save(&d, &n, &optim, Position::default()).unwrap();
        let mut adam = AdamConfig::new().init();
        // Another width: fc.weight's shape; the module is left as it was.
        let mut wide = net(6, &device);
        let before = bits(&adapter::params_to_flat(&wide).unwrap());
        let e = load(&d, &mut wide, &mut adam).unwrap_err();
        assert_eq!(bits(&adapter::params_to_flat(&wide).unwrap()), before);
        let Error::Mismatch { path: p, mismatch } = &e else {
            panic!("{e}")
        };
        assert_eq!(p, &path);
        assert_eq!(
            mismatch,
            &Mismatch::Shape {
                name: "fc.weight".into(),
                checkpoint: vec![5, 3],
                model: vec![6, 3],
            }
        );
        assert!(e.to_string().contains("step-000000000000.json"), "{e}");
        // A module with a tensor the checkpoint lacks, and one lacking a checkpoint's tensor.
        #[derive(Module, Debug)]
        struct Wider {
            fc: Linear,
            bn: BatchNorm,
            out: Linear,
            extra: Param<Tensor<1>>,
        }
        let mut w = Wider {
            fc: LinearConfig::new(3, 5).init(&device),
            bn: BatchNormConfig::new(5).init(&device),
            out: LinearConfig::new(5, 2).init(&device),
            extra: Param::from_tensor(Tensor::zeros([2], &device)),
        };
        let e = load(&d, &mut w, &mut adam).unwrap_err().to_string();
        assert!(
            e.contains("extra") && e.contains("not in the checkpoint"),
            "{e}"
        );
        #[derive(Module, Debug)]
        struct Narrower {
            fc: Linear,
            bn: BatchNorm,
        }
        let mut s = Narrower {
            fc: LinearConfig::new(3, 5).init(&device),
            bn: BatchNormConfig::new(5).init(&device),
        };
        let e = load(&d, &mut s, &mut adam).unwrap_err().to_string();
        assert!(e.contains("out.") && e.contains("not in the module"), "{e}");
        // A damaged tensor file: the file and the check named, nothing loaded.
        let t = d.join("step-000000000000.safetensors");
        let mut bytes = std::fs::read(&t).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xFF;
        std::fs::write(&t, &bytes).unwrap();
        let e = load(&d, &mut net(5, &device), &mut adam)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("step-000000000000.safetensors") && e.contains("checksum mismatch"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
