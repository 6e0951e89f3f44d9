//! The Burn adapter: named float parameters, gradients to flat `f32` buffers and back, parameter
//! values in and out. The only code of phalanx that touches Burn.
//!
//! Parameters are named by their module path (`layers.0.weight`), the field names Burn's
//! [`ModuleVisitor`] reports on the way down, and listed in visiting order, which is the order the
//! fields are declared: the order of PyTorch's `model.parameters()`. Burn's [`ParamId`]s are random
//! per process, so they never leave this module; ranks agree on names and positions instead.
//!
//! Note [Host-staged gradients]: gradients are read back to host `f32` ([`GradTable::grad_into`])
//! and the reduced ones are rebuilt on the parameter's own device ([`GradTable::register_grad`]
//! takes the device from the parameter, never a default), so this adapter works the same on
//! every Burn device: with `--device cuda` each bucket is copied from the GPU, reduced by the
//! process group (native shared memory/TCP, MPI or NCCL) and copied back, as Gloo does for
//! CUDA tensors. Ranks that share one GPU, or a GPU job without NCCL, need nothing else. Device
//! buckets skip the host: [`GradTable::take_flat_grad`] and [`GradTable::register_flat_grad`]
//! hand gradients over as flat tensors on the parameter's device (Note [Device buckets] in
//! `device_buckets.rs`).

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::{DType, Device, Shape, Tensor, TensorData};

pub use burn::optim::GradientsParams;
pub use burn::tensor::Gradients;

use super::ParamInfo;
use crate::{Error, Result};

/// The float parameters of `module`, in canonical order, with their names and shapes.
pub fn param_infos<M: Module>(module: &M) -> Vec<ParamInfo> {
    walk(module).into_iter().map(|h| h.info).collect()
}

/// The values of every float parameter of `module`, in canonical order, as flat `f32` (row-major,
/// in Burn's storage layout: a `Linear` weight is `[d_input, d_output]`).
pub fn params_to_flat<M: Module>(module: &M) -> Result<Vec<Vec<f32>>> {
    walk(module)
        .into_iter()
        .map(|h| {
            let data = (h.value)();
            to_f32(data, &h.info.name)
        })
        .collect()
}

/// Replaces the value of every float parameter of `module` by `values` (canonical order, flat
/// `f32`), keeping each parameter's id, device, dtype and gradient requirement.
pub fn set_params_from_flat<M: Module>(module: M, values: &[Vec<f32>]) -> Result<M> {
    let infos = param_infos(&module);
    if infos.len() != values.len() {
        return Err(Error::ParamCount {
            expected: infos.len(),
            got: values.len(),
        });
    }
    let mut by_name = HashMap::with_capacity(infos.len());
    for (info, value) in infos.iter().zip(values) {
        if info.numel() != value.len() {
            return Err(Error::ParamSize {
                name: info.name.clone(),
                expected: info.numel(),
                got: value.len(),
            });
        }
        by_name.insert(info.name.clone(), value.as_slice());
    }
    let mut setter = Setter {
        path: Vec::new(),
        values: by_name,
    };
    Ok(module.map(&mut setter))
}

/// The gradient side of one step: built from the module, it reads each parameter's gradient out
/// of Burn's [`Gradients`] and builds the [`GradientsParams`] the optimizer takes.
///
/// Build it again after every optimizer step: the module's tensors change.
pub struct GradTable {
    handles: Vec<Handle>,
}

impl GradTable {
    /// Walks `module` and records its float parameters in canonical order.
    pub fn new<M: Module>(module: &M) -> Self {
        GradTable {
            handles: walk(module),
        }
    }

    /// Names and shapes, in canonical order.
    pub fn infos(&self) -> impl Iterator<Item = &ParamInfo> {
        self.handles.iter().map(|h| &h.info)
    }

    /// Number of float parameters.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Whether the module has no float parameter.
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// Writes parameter `index`'s gradient into `out`, removing it from `grads`: `out += grad`
    /// when `accumulate`, `out = grad` otherwise. A parameter without a gradient (unused in this
    /// step, or frozen) counts as a zero gradient. Returns whether it had one.
    pub fn grad_into(
        &self,
        index: usize,
        grads: &mut Gradients,
        out: &mut [f32],
        accumulate: bool,
    ) -> Result<bool> {
        let h = &self.handles[index];
        let Some(grad) = (h.take_grad)(grads) else {
            if !accumulate {
                out.fill(0.0);
            }
            return Ok(false);
        };
        let data = grad.try_into_data_as::<f32>().map_err(|e| Error::Tensor {
            name: h.info.name.clone(),
            reason: e.to_string(),
        })?;
        let grad = as_f32(&data, &h.info.name)?;
        if grad.len() != out.len() {
            return Err(Error::ParamSize {
                name: h.info.name.clone(),
                expected: out.len(),
                got: grad.len(),
            });
        }
        if accumulate {
            for (o, g) in out.iter_mut().zip(grad) {
                *o += *g;
            }
        } else {
            out.copy_from_slice(grad);
        }
        Ok(true)
    }

    /// Parameter `index`'s gradient as a flat tensor on the parameter's device, removed from
    /// `grads`; zeros (on that device) when it has none. No copy to the host.
    pub fn take_flat_grad(&self, index: usize, grads: &mut Gradients) -> Tensor<1> {
        let h = &self.handles[index];
        (h.take_grad)(grads)
            .unwrap_or_else(|| Tensor::zeros([h.info.numel()], (&h.device, h.dtype)))
    }

    /// Registers `grad` (flat, canonical layout) as parameter `index`'s gradient in `params`.
    pub fn register_grad(&self, index: usize, grad: Vec<f32>, params: &mut GradientsParams) {
        let h = &self.handles[index];
        let data = TensorData::new(grad, [h.info.numel()]);
        let flat = Tensor::<1>::from_data(data, (&h.device, h.dtype));
        (h.register)(flat, params)
    }

    /// Registers `grad`, a flat tensor on the parameter's device, as parameter `index`'s
    /// gradient in `params` (reshaped to the parameter's shape, no copy to the host).
    pub fn register_flat_grad(&self, index: usize, grad: Tensor<1>, params: &mut GradientsParams) {
        (self.handles[index].register)(grad, params)
    }

    /// The device of parameter `index`.
    pub fn device(&self, index: usize) -> &Device {
        &self.handles[index].device
    }
}

/// One float parameter, its dimension erased behind closures (Burn's tensors carry the rank as a
/// const generic, which a list cannot).
struct Handle {
    info: ParamInfo,
    device: Device,
    dtype: DType,
    value: Box<dyn Fn() -> Read>,
    take_grad: Box<TakeGrad>,
    register: Box<Register>,
}

/// Removes the parameter's gradient from Burn's gradients, flattened, on its device.
type TakeGrad = dyn Fn(&mut Gradients) -> Option<Tensor<1>>;
/// Registers a flat gradient for the parameter, reshaped to its shape.
type Register = dyn Fn(Tensor<1>, &mut GradientsParams);

/// A tensor read back from the library, or the library's error message.
type Read = std::result::Result<TensorData, String>;

fn walk<M: Module>(module: &M) -> Vec<Handle> {
    let mut walker = Walker {
        path: Vec::new(),
        handles: Vec::new(),
    };
    module.visit(&mut walker);
    walker.handles
}

struct Walker {
    path: Vec<String>,
    handles: Vec<Handle>,
}

impl Walker {
    fn name(&self) -> String {
        self.path.join(".")
    }
}

impl ModuleVisitor for Walker {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let id: ParamId = param.id;
        let tensor = param.val();
        let shape = tensor.shape().as_slice().to_vec();
        let device: Device = tensor.device().inner();
        let dtype = tensor.dtype();
        let requires_grad = param.is_require_grad();
        let info = ParamInfo {
            name: self.name(),
            shape: shape.clone(),
        };
        let for_value = tensor.clone();
        let numel = info.numel();
        self.handles.push(Handle {
            info,
            device: device.clone(),
            dtype,
            value: Box::new(move || {
                for_value
                    .clone()
                    .try_into_data_as::<f32>()
                    .map_err(|e| e.to_string())
            }),
            take_grad: Box::new(move |grads| {
                // Like Burn's own `GradientsParams::from_module`: a frozen parameter has no node.
                if !requires_grad {
                    return None;
                }
                let grad = tensor.grad_remove(grads)?;
                Some(grad.reshape([numel]))
            }),
            register: Box::new(move |grad, params| {
                let grad: Tensor<D> = grad.reshape(Shape::from(shape.clone()));
                params.register::<D>(id, grad);
            }),
        });
    }
}

struct Setter<'a> {
    path: Vec<String>,
    values: HashMap<String, &'a [f32]>,
}

impl ModuleMapper for Setter<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let Some(value) = self.values.get(&self.path.join(".")) else {
            return param;
        };
        param.map(|old| {
            let device = old.device();
            let (dtype, shape, require_grad) = (old.dtype(), old.shape(), old.is_require_grad());
            drop(old);
            let data = TensorData::new(value.to_vec(), shape);
            Tensor::<D>::from_data(data, (&device, dtype)).set_require_grad(require_grad)
        })
    }
}

fn as_f32<'a>(data: &'a TensorData, name: &str) -> Result<&'a [f32]> {
    data.as_slice::<f32>().map_err(|e| Error::Tensor {
        name: name.to_string(),
        reason: format!("{e:?}"),
    })
}

fn to_f32(data: Read, name: &str) -> Result<Vec<f32>> {
    let data = data.map_err(|reason| Error::Tensor {
        name: name.to_string(),
        reason,
    })?;
    Ok(as_f32(&data, name)?.to_vec())
}
