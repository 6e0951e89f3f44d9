//! The optimizer's state, parameter by parameter, in and out of Burn's burnpack record: what
//! lets a checkpoint's state be cut into shards (Note [Shard layout] in phalanx-ddp) and
//! joined again, at any world size and between any sharding modes.
//!
//! Burn's record keys every state tensor `"{param id}.{field}"` (`5.momentum.moment_1`) and
//! every scalar the same way (`5.momentum.time`, and `5.__rank`, the parameter's rank). SGD's
//! momentum and Adam's and AdamW's moments are element-wise (one value per element of the
//! parameter), so the state of some elements of a parameter is the same slice of each field;
//! a field of another shape (a factored second moment) cannot be cut and is refused by name.

use std::collections::BTreeMap;
use std::ops::Range;

use burn::tensor::Bytes;
use burn_pack::{DType, Reader, Scalar, Tensor, Writer};

use crate::format::Strided;

/// Burn's scalar holding a parameter's number of dimensions.
const RANK_KEY: &str = "__rank";

/// One parameter's optimizer state.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamState {
    /// Its parameter id (Note [Stable parameter ids]).
    pub id: u64,
    /// Its module path, when the optimizer recorded one.
    pub path: Option<String>,
    /// Tensor fields (`momentum.moment_1`): shape and row-major values.
    pub tensors: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    /// Scalar fields (`momentum.time`), the rank key included.
    pub scalars: BTreeMap<String, Scalar>,
}

impl ParamState {
    /// The state of elements `range` of this parameter (flat, `numel` elements in all), as a
    /// one-dimensional parameter of its own: each element-wise field sliced.
    pub fn slice(&self, numel: usize, range: Range<usize>) -> Result<ParamState, String> {
        let mut tensors = BTreeMap::new();
        for (field, (shape, values)) in &self.tensors {
            if values.len() != numel {
                return Err(self.not_elementwise(field, shape, numel));
            }
            tensors.insert(
                field.clone(),
                (vec![range.len()], values[range.clone()].to_vec()),
            );
        }
        let mut scalars = self.scalars.clone();
        scalars.insert(RANK_KEY.into(), Scalar::UInt(1));
        Ok(ParamState {
            id: self.id,
            path: self.path.clone(),
            tensors,
            scalars,
        })
    }

    /// The state of the elements `blocks` of this parameter (flat, `numel` elements in all)
    /// as a parameter of its own of `shape` and id `id`: the state of a piece of a model cut
    /// across ranks (Note [Pieces of a cut model] in `sharded.rs`).
    pub fn select(
        &self,
        numel: usize,
        blocks: &Strided,
        shape: &[usize],
        id: u64,
    ) -> Result<ParamState, String> {
        let mut tensors = BTreeMap::new();
        for (field, (fshape, values)) in &self.tensors {
            if values.len() != numel || blocks.runs().any(|r| r.end > numel) {
                return Err(self.not_elementwise(field, fshape, numel));
            }
            tensors.insert(field.clone(), (shape.to_vec(), blocks.gather(values)));
        }
        let mut scalars = self.scalars.clone();
        scalars.insert(RANK_KEY.into(), Scalar::UInt(shape.len() as u64));
        Ok(ParamState {
            id,
            path: self.path.clone(),
            tensors,
            scalars,
        })
    }

    /// The state of a whole parameter of `shape` from the states of its pieces, each with the
    /// range of the flat parameter it covers (together they tile it). Scalars come from the
    /// first piece (every piece was stepped as often).
    pub fn join(
        shape: &[usize],
        pieces: &[(Range<usize>, ParamState)],
    ) -> Result<ParamState, String> {
        let numel: usize = shape.iter().product();
        let (_, first) = pieces
            .first()
            .ok_or_else(|| "no piece of the parameter holds optimizer state".to_string())?;
        let mut tensors = BTreeMap::new();
        for field in first.tensors.keys() {
            let mut whole = vec![0f32; numel];
            let mut covered = 0;
            for (range, piece) in pieces {
                let (pshape, values) = piece.tensors.get(field).ok_or_else(|| {
                    format!(
                        "a piece of parameter {} has no optimizer field {field}",
                        first.id
                    )
                })?;
                if values.len() != range.len() || range.end > numel {
                    return Err(piece.not_elementwise(field, pshape, range.len()));
                }
                whole[range.clone()].copy_from_slice(values);
                covered += range.len();
            }
            if covered != numel {
                return Err(format!(
                    "the pieces of parameter {} cover {covered} of its {numel} elements",
                    first.id
                ));
            }
            tensors.insert(field.clone(), (shape.to_vec(), whole));
        }
        let mut scalars = first.scalars.clone();
        scalars.insert(RANK_KEY.into(), Scalar::UInt(shape.len() as u64));
        Ok(ParamState {
            id: first.id,
            path: first.path.clone(),
            tensors,
            scalars,
        })
    }

    fn not_elementwise(&self, field: &str, shape: &[usize], numel: usize) -> String {
        format!(
            "optimizer state field {field} of parameter {} has shape {shape:?}, not one value \
             per element of the parameter ({numel}): it cannot be sharded",
            self.id
        )
    }
}

/// The per-parameter states of a burnpack optimizer record, by parameter id.
pub fn decode(bytes: &[u8]) -> Result<BTreeMap<u64, ParamState>, String> {
    let reader =
        Reader::from_bytes(Bytes::from_bytes_vec(bytes.to_vec())).map_err(|e| e.to_string())?;
    let scalars = reader.scalars().clone();
    let paths = reader.metadata().clone();
    let mut states: BTreeMap<u64, ParamState> = BTreeMap::new();
    fn entry<'s>(
        states: &'s mut BTreeMap<u64, ParamState>,
        paths: &BTreeMap<String, String>,
        id: u64,
    ) -> &'s mut ParamState {
        states.entry(id).or_insert_with(|| ParamState {
            id,
            path: paths.get(&id.to_string()).cloned(),
            tensors: BTreeMap::new(),
            scalars: BTreeMap::new(),
        })
    }
    for tensor in reader.into_tensors().map_err(|e| e.to_string())? {
        let (name, dtype, shape, param_id, data) =
            tensor.into_parts().map_err(|e| e.to_string())?;
        let (id, field) = split_key(&name)?;
        if param_id.is_some_and(|p| p != id) {
            return Err(format!(
                "optimizer state tensor {name} names parameter {param_id:?}"
            ));
        }
        if dtype != DType::F32 {
            return Err(format!(
                "optimizer state tensor {name} is {dtype:?}, not f32"
            ));
        }
        let values: Vec<f32> = data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("chunks of 4")))
            .collect();
        let shape: Vec<usize> = shape.iter().copied().collect();
        entry(&mut states, &paths, id)
            .tensors
            .insert(field.to_string(), (shape, values));
    }
    for (key, value) in scalars {
        let (id, field) = split_key(&key)?;
        entry(&mut states, &paths, id)
            .scalars
            .insert(field.to_string(), value);
    }
    Ok(states)
}

/// A burnpack optimizer record of `states`, which Burn's `OptimizerRecord::from_bytes` reads.
pub fn encode<'a>(states: impl IntoIterator<Item = &'a ParamState>) -> Result<Vec<u8>, String> {
    let mut tensors = Vec::new();
    let mut scalars = Vec::new();
    let mut paths = Vec::new();
    for state in states {
        for (field, (shape, values)) in &state.tensors {
            let bytes = Bytes::from_bytes_vec(bytemuck::cast_slice(values).to_vec());
            tensors.push(Tensor::new(
                format!("{}.{field}", state.id),
                DType::F32,
                shape.clone(),
                Some(state.id),
                bytes,
            ));
        }
        for (field, value) in &state.scalars {
            scalars.push((format!("{}.{field}", state.id), *value));
        }
        if let Some(path) = &state.path {
            paths.push((state.id.to_string(), path.clone()));
        }
    }
    let mut writer = Writer::new(tensors);
    for (key, value) in &scalars {
        writer = writer.with_scalar(key, *value);
    }
    for (key, value) in &paths {
        writer = writer.with_metadata(key, value);
    }
    Ok(writer.into_bytes().map_err(|e| e.to_string())?.to_vec())
}

/// `"5.momentum.time"` → `(5, "momentum.time")`.
fn split_key(key: &str) -> Result<(u64, &str), String> {
    key.split_once('.')
        .and_then(|(id, field)| Some((id.parse().ok()?, field)))
        .ok_or_else(|| format!("optimizer state entry {key:?} is not <param id>.<field>"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::{Module, Param, ParamId};
    use burn::tensor::{Device, Tensor as BurnTensor, TensorData};

    #[derive(Module, Debug)]
    struct Two {
        w: Param<BurnTensor<2>>,
    }

    fn adam_state() -> Vec<u8> {
        let device = Device::flex().autodiff();
        let w = BurnTensor::<2>::from_data(
            TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]),
            &device,
        )
        .require_grad();
        let m = Two {
            w: Param::initialized(ParamId::from(4), w),
        };
        let loss = m.w.val().powf_scalar(2.0).sum();
        let grads = burn::optim::GradientsParams::from_grads(loss.backward(), &m);
        // torch.optim.Adam's eps, as phalanx-train's optimizer sets it.
        let mut optim = burn::optim::AdamConfig::new().with_epsilon(1e-8).init();
        let _ = optim.step(1e-3, m, grads);
        optim.to_record().into_bytes().unwrap().to_vec()
    }

    #[test]
    fn a_record_round_trips_and_its_pieces_join_to_the_whole() {
        let bytes = adam_state();
        let states = decode(&bytes).unwrap();
        let whole = &states[&4];
        assert_eq!(whole.tensors.len(), 2, "{whole:?}");
        assert_eq!(decode(&encode(states.values()).unwrap()).unwrap(), states);
        let a = whole.slice(6, 0..2).unwrap();
        let b = whole.slice(6, 2..6).unwrap();
        assert!(a.tensors.values().all(|(s, v)| s == &[2] && v.len() == 2));
        let joined = ParamState::join(&[2, 3], &[(0..2, a), (2..6, b)]).unwrap();
        assert_eq!(&joined, whole);
        // What the pieces encode to, Burn reads back.
        let record = burn::optim::OptimizerRecord::from_bytes(Bytes::from_bytes_vec(
            encode([&joined]).unwrap(),
        ))
        .unwrap();
        let _ = burn::optim::AdamConfig::new().init().load_record(record);
    }

    #[test]
    fn a_field_that_is_not_elementwise_is_named() {
        let mut state = decode(&adam_state()).unwrap().remove(&4).unwrap();
        state
            .tensors
            .insert("factored.row".into(), (vec![2], vec![0.0; 2]));
        let e = state.slice(6, 0..3).unwrap_err();
        assert!(
            e.contains("factored.row") && e.contains("cannot be sharded"),
            "{e}"
        );
    }
}
