//! The Burn adapter: named float parameters, gradients to flat `f32` buffers and back, parameter
//! values in and out: the only code of phalanx that walks Burn modules and reads or builds their
//! gradients (device buckets hold Burn tensors too, `adapter/device_buckets.rs`).
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
//! `adapter/device_buckets.rs`).
//!
//! Note [Parameters, buffers and frozen]
//! A Burn module holds three kinds of float tensors that its visitor reports alike through
//! `visit_float`: trainable parameters, frozen parameters (`Param::set_require_grad(false)`,
//! `Module::freeze`) and buffers (`RunningState`: BatchNorm's running mean and variance). DDP
//! must treat them differently: only trainable parameters get gradients and travel in buckets;
//! buffers change in the forward pass and are synchronised after every step; frozen parameters
//! are broadcast once and never touched again (no zero gradient registered for them, so neither
//! weight decay nor momentum moves them, as in PyTorch). Both frozen parameters and buffers
//! report `is_require_grad() == false`; what tells them apart is that `RunningState::map` forces
//! its value back to `require_grad(false)` whatever the mapper returns. [`state_infos`] maps a
//! clone of the module with a mapper that asks every float for a gradient and visits the result:
//! what still needs none is a buffer. The clone shares the running states' storage, into which
//! that map writes the same value back, so the original module is unchanged.
//!
//! Burn keeps a running state's newest value per thread until the next update or a `valid()`
//! snapshot ("might be outdated by one update"), and a later update on the same thread replaces
//! anything written in between. [`flush_running_state`] folds the pending values in first, so
//! that reading a buffer sees this step's value and writing one (the synchronisation) sticks.

use std::cell::Cell;
use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::kind::Basic;
use burn::tensor::{Bool, DType, Device, Int, Shape, Tensor, TensorData};

pub use burn::optim::GradientsParams;
pub use burn::tensor::Gradients;

use super::{ParamInfo, StateInfo, StateKind};
use crate::hook::{BucketBuffer, LentGradient};
use crate::reducer::GradientSource;
use crate::{Error, Result};

/// The float tensors of `module` (trainable and frozen parameters and buffers), in canonical
/// order, with their names and shapes: everything a checkpoint holds.
pub fn param_infos<M: Module>(module: &M) -> Vec<ParamInfo> {
    walk(module).into_iter().map(|h| h.info).collect()
}

/// Every tensor of `module` in canonical order, floats first, then int and bool tensors, each
/// with its [`StateKind`] (Note [Parameters, buffers and frozen]).
pub fn state_infos<M: Module>(module: &M) -> Vec<StateInfo> {
    let floats = walk(module);
    let mut ask_all = AskGradients;
    let asked = walk(&module.clone().map(&mut ask_all));
    let mut out: Vec<StateInfo> = floats
        .iter()
        .zip(&asked)
        .map(|(h, a)| StateInfo {
            info: h.info.clone(),
            kind: match (h.requires_grad, a.requires_grad) {
                (true, _) => StateKind::Trainable,
                (false, true) => StateKind::Frozen,
                (false, false) => StateKind::Buffer,
            },
        })
        .collect();
    let mut discrete = DiscreteWalker::default();
    module.visit(&mut discrete);
    out.extend(discrete.found.into_iter().map(|d| StateInfo {
        info: d.info,
        kind: d.kind,
    }));
    out
}

thread_local! {
    /// Whether this thread's walks leave undrawn parameters undrawn ([`without_drawing`]).
    static UNDRAWN_STAY: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread's walks of modules leaving the parameters Burn has not drawn yet
/// undrawn, each drawn only when its value is read (Note [Undrawn parameters]): the engines
/// cut a model a tensor at a time instead of drawing it whole first. Only for a model whose
/// undrawn parameters are all trainable and that has run no forward pass, as one built with
/// deferred init is (`phalanx_train::with_deferred_init`).
pub fn without_drawing<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            UNDRAWN_STAY.with(|u| u.set(self.0));
        }
    }
    let _restore = Restore(UNDRAWN_STAY.with(|u| u.replace(true)));
    f()
}

/// Folds every running state's pending per-thread value into its value (Note [Parameters,
/// buffers and frozen]): call before reading or writing buffers.
pub fn flush_running_state<M: Module>(module: &M) {
    // Inside `without_drawing`, `valid` would draw every undrawn parameter (Note [Undrawn
    // parameters]); the caller's module has run no forward pass (a forward draws what it
    // uses), so no running state of it holds a pending value: nothing to fold.
    if UNDRAWN_STAY.with(Cell::get) {
        let mut undrawn = Undrawn(false);
        module.visit(&mut undrawn);
        if undrawn.0 {
            return;
        }
    }
    // `valid` syncs each running state in place (its storage is shared with this module) on
    // the way to an inference snapshot, which is dropped.
    drop(module.valid());
}

/// The values of every float tensor of `module`, in canonical order, as flat `f32` (row-major,
/// in Burn's storage layout: a `Linear` weight is `[d_input, d_output]`). Buffers are flushed
/// first ([`flush_running_state`]).
pub fn params_to_flat<M: Module>(module: &M) -> Result<Vec<Vec<f32>>> {
    flush_running_state(module);
    walk(module)
        .into_iter()
        .map(|h| {
            let data = (h.value)();
            to_f32(data, &h.info.name)
        })
        .collect()
}

/// The values of the float tensors at canonical positions `indices`, as flat `f32`, without
/// flushing buffers (the caller does, once).
pub fn floats_to_flat<M: Module>(module: &M, indices: &[usize]) -> Result<Vec<Vec<f32>>> {
    let handles = walk(module);
    indices
        .iter()
        .map(|&i| {
            let h = &handles[i];
            to_f32((h.value)(), &h.info.name)
        })
        .collect()
}

/// Replaces the float tensors named in `values` (flat `f32`, canonical layout), keeping each
/// one's id, device, dtype and gradient requirement; the others are left as they are.
pub fn set_floats_by_name<M: Module>(module: M, values: HashMap<String, &[f32]>) -> M {
    let mut setter = Setter {
        path: Vec::new(),
        values,
    };
    module.map(&mut setter)
}

/// Replaces the float tensors named in `values` by the given flat `f32` values and shapes,
/// keeping each one's id, device, dtype and gradient requirement; an empty shape slice frees
/// the tensor (an empty tensor of the same rank takes its place: what a fully sharded module
/// holds between steps, Note [Full sharding] in `fsdp/fully_sharded/mod.rs`). The others are left
/// as they are.
pub fn set_floats_shaped<M: Module>(module: M, values: HashMap<String, (&[f32], &[usize])>) -> M {
    let mut setter = ShapedSetter {
        path: Vec::new(),
        values,
    };
    module.map(&mut setter)
}

/// A tensor's flat `f32` values (row-major) and its shape.
pub type Shaped = (Vec<f32>, Vec<usize>);

/// Replaces the float tensors of `module` that `which` marks (one flag per float tensor, in
/// visiting order) by `values` in turn (flat `f32` and shape), keeping each one's id,
/// device, dtype and gradient requirement; the others are left as they are, and every tensor
/// when `values` is empty. A fully sharded block's gathered parameters (Note [Unit operation]
/// in `unit_op.rs`): marked by position because a module's inference copy (`valid()`) no
/// longer says which tensors take gradients.
pub fn set_floats_in_order<M: Module>(module: M, which: &[bool], values: Vec<Shaped>) -> M {
    if values.is_empty() {
        return module;
    }
    let mut setter = InOrder {
        which,
        values: values.into_iter(),
        float: 0,
    };
    module.map(&mut setter)
}

struct InOrder<'a> {
    which: &'a [bool],
    values: std::vec::IntoIter<Shaped>,
    float: usize,
}

impl ModuleMapper for InOrder<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let marked = self.which.get(self.float).copied().unwrap_or(false);
        self.float += 1;
        if !marked {
            return param;
        }
        let Some((value, shape)) = self.values.next() else {
            return param;
        };
        param.map(|old| {
            let device = old.device();
            let (dtype, require_grad) = (old.dtype(), old.is_require_grad());
            drop(old);
            // Moved, not copied, into the tensor.
            let data = TensorData::new(value, Shape::from(shape));
            Tensor::<D>::from_data(data, (&device, dtype)).set_require_grad(require_grad)
        })
    }
}

/// The int and bool tensors of `module`, in canonical order, as their raw bytes.
pub fn discrete_to_bytes<M: Module>(module: &M) -> Vec<Vec<u8>> {
    let mut discrete = DiscreteWalker::default();
    module.visit(&mut discrete);
    discrete.found.into_iter().map(|d| d.bytes).collect()
}

/// Replaces the int and bool tensors of `module` by `bytes` (canonical order, as
/// [`discrete_to_bytes`] gives them), keeping each one's id, device and dtype.
pub fn set_discrete_from_bytes<M: Module>(module: M, bytes: Vec<Vec<u8>>) -> M {
    let mut setter = DiscreteSetter {
        values: bytes.into_iter(),
    };
    module.map(&mut setter)
}

/// Replaces the value of every float tensor of `module` by `values` (canonical order, flat
/// `f32`), keeping each one's id, device, dtype and gradient requirement.
pub fn set_params_from_flat<M: Module>(module: M, values: &[Vec<f32>]) -> Result<M> {
    check_flat(&module, values)?;
    flush_running_state(&module);
    let by_name = param_infos(&module)
        .into_iter()
        .zip(values)
        .map(|(info, value)| (info.name, value.as_slice()))
        .collect();
    Ok(set_floats_by_name(module, by_name))
}

/// Whether `values` fit `module`'s float tensors for [`set_params_from_flat`]: one per tensor,
/// each of its length; the first that does not is named.
pub fn check_flat<M: Module>(module: &M, values: &[Vec<f32>]) -> Result<()> {
    let infos = param_infos(module);
    if infos.len() != values.len() {
        return Err(Error::ParamCount {
            expected: infos.len(),
            got: values.len(),
        });
    }
    for (info, value) in infos.iter().zip(values) {
        if info.numel() != value.len() {
            return Err(Error::ParamSize {
                name: info.name.clone(),
                expected: info.numel(),
                got: value.len(),
            });
        }
    }
    Ok(())
}

/// The gradient side of one step: built from the module, it reads each trainable parameter's
/// gradient out of Burn's [`Gradients`] and builds the [`GradientsParams`] the optimizer takes.
/// Frozen parameters and buffers are not in it (Note [Parameters, buffers and frozen]).
///
/// Build it again after every optimizer step: the module's tensors change.
pub struct GradTable {
    handles: Vec<Handle>,
}

impl GradTable {
    /// Walks `module` and records its trainable parameters in canonical order.
    pub fn new<M: Module>(module: &M) -> Self {
        GradTable {
            handles: walk(module)
                .into_iter()
                .filter(|h| h.requires_grad)
                .collect(),
        }
    }

    /// Whether parameter `index` has a gradient in `grads` (it was used in this backward).
    pub fn has_grad(&self, index: usize, grads: &Gradients) -> bool {
        (self.handles[index].has_grad)(grads)
    }

    /// A zero gradient for parameter `index`, flat, on its device.
    pub fn zeros(&self, index: usize) -> Tensor<1> {
        let h = &self.handles[index];
        Tensor::zeros([h.info.numel()], (&h.device, h.dtype))
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

    /// Lends parameter `index`'s gradient to the reducer in Burn's own memory, removed from
    /// `grads` (Note [Gradient as bucket view] in `bucket.rs`): flex moves a tensor nothing
    /// else holds out without a copy. `None` when it has none.
    pub fn lend_grad(&self, index: usize, grads: &mut Gradients) -> Result<Option<BucketBuffer>> {
        let h = &self.handles[index];
        let Some(grad) = (h.take_grad)(grads) else {
            return Ok(None);
        };
        let tensor_error = |e: &dyn std::fmt::Display| Error::Tensor {
            name: h.info.name.clone(),
            reason: e.to_string(),
        };
        let mut data = grad
            .try_into_data_as::<f32>()
            .map_err(|e| tensor_error(&e))?;
        // Checked once here, so that the reducer's slice accesses cannot fail.
        let len = data
            .as_mut_slice::<f32>()
            .map_err(|e| tensor_error(&e))?
            .len();
        if len != h.info.numel() {
            return Err(Error::ParamSize {
                name: h.info.name.clone(),
                expected: h.info.numel(),
                got: len,
            });
        }
        Ok(Some(BucketBuffer::lent(BurnGradient(data))))
    }

    /// Registers an averaged bucket of one parameter as parameter `index`'s gradient: a lent
    /// gradient goes back to Burn as it is, a packed buffer is moved into a tensor.
    pub fn register_bucket(
        &self,
        index: usize,
        bucket: BucketBuffer,
        params: &mut GradientsParams,
    ) {
        match bucket.into_inner() {
            Ok(packed) => self.register_grad(index, packed, params),
            Err(lent) => {
                let h = &self.handles[index];
                let data = lent
                    .downcast::<BurnGradient>()
                    .expect("a lent gradient comes back to the adapter that lent it")
                    .0;
                (h.register)(Tensor::<1>::from_data(data, (&h.device, h.dtype)), params)
            }
        }
    }

    /// Parameter `index`'s gradient as a flat tensor on the parameter's device, removed from
    /// `grads`; zeros (on that device) when it has none. No copy to the host.
    pub fn take_flat_grad(&self, index: usize, grads: &mut Gradients) -> Tensor<1> {
        (self.handles[index].take_grad)(grads).unwrap_or_else(|| self.zeros(index))
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

/// This step's gradients as the reducer takes them: read out of Burn's `Gradients` through the
/// adapter, or zeros for a rank that has joined (Note [Uneven inputs] in `ddp.rs`).
pub(crate) struct StepGradients<'a> {
    pub(crate) table: &'a GradTable,
    pub(crate) grads: Option<&'a mut Gradients>,
}

impl GradientSource for StepGradients<'_> {
    fn fill(&mut self, p: usize, out: &mut [f32], accumulate: bool) -> Result<()> {
        match self.grads.as_deref_mut() {
            Some(grads) => self.table.grad_into(p, grads, out, accumulate).map(drop),
            None if accumulate => Ok(()),
            None => {
                out.fill(0.0);
                Ok(())
            }
        }
    }

    fn lend(&mut self, p: usize) -> Result<Option<BucketBuffer>> {
        match self.grads.as_deref_mut() {
            Some(grads) => self.table.lend_grad(p, grads),
            None => Ok(None),
        }
    }
}

/// A gradient lent to the reducer: Burn's storage, checked to hold `f32` when lent.
#[derive(Debug)]
struct BurnGradient(TensorData);

impl LentGradient for BurnGradient {
    fn as_slice(&self) -> &[f32] {
        self.0.as_slice().expect("checked to be f32 when lent")
    }

    fn as_mut_slice(&mut self) -> &mut [f32] {
        self.0.as_mut_slice().expect("checked to be f32 when lent")
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// One float parameter, its dimension erased behind closures (Burn's tensors carry the rank as a
/// const generic, which a list cannot).
struct Handle {
    info: ParamInfo,
    device: Device,
    dtype: DType,
    requires_grad: bool,
    value: Box<dyn Fn() -> Read>,
    has_grad: Box<dyn Fn(&Gradients) -> bool>,
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
        // Note [Undrawn parameters]
        // Inside `without_drawing`, a parameter Burn has not drawn yet (a model built with
        // deferred init, Note [Deferred init] in phalanx-train) is read for its name, shape and
        // device without drawing it: listing a model's tensors must not hold the whole model.
        // It is taken as trainable (Burn keeps a lazy parameter's gradient flag private; the
        // caller vouches that its undrawn parameters are trainable), and it is drawn when its
        // value or gradient is first asked for. Elsewhere every parameter is drawn first, in
        // canonical order, as Burn's lazy initialisers expect.
        let undrawn = !param.is_initialized() && UNDRAWN_STAY.with(Cell::get);
        let (shape, device, dtype, requires_grad) = match !undrawn {
            true => {
                let tensor = param.val();
                let shape = tensor.shape().as_slice().to_vec();
                (
                    shape,
                    tensor.device().inner(),
                    tensor.dtype(),
                    param.is_require_grad(),
                )
            }
            false => {
                let device = param.lazy_device();
                // The device's float type, from an empty tensor (nothing drawn).
                let dtype = Tensor::<1>::empty([0], &device).dtype();
                let requires_grad = device.is_autodiff();
                (
                    param.lazy_shape().as_slice().to_vec(),
                    device.inner(),
                    dtype,
                    requires_grad,
                )
            }
        };
        let info = ParamInfo {
            name: self.name(),
            shape: shape.clone(),
        };
        let for_value = param.clone();
        let for_has = param.clone();
        let for_take = param.clone();
        let numel = info.numel();
        self.handles.push(Handle {
            info,
            device: device.clone(),
            dtype,
            requires_grad,
            value: Box::new(move || {
                for_value
                    .val()
                    .try_into_data_as::<f32>()
                    .map_err(|e| e.to_string())
            }),
            has_grad: Box::new(move |grads| requires_grad && for_has.val().grad(grads).is_some()),
            take_grad: Box::new(move |grads| {
                // Like Burn's own `GradientsParams::from_module`: a frozen parameter has no node.
                if !requires_grad {
                    return None;
                }
                let grad = for_take.val().grad_remove(grads)?;
                Some(grad.reshape([numel]))
            }),
            register: Box::new(move |grad, params| {
                let grad: Tensor<D> = grad.reshape(Shape::from(shape.clone()));
                params.register::<D>(id, grad);
            }),
        });
    }
}

/// Whether a module has a float parameter Burn has not drawn yet.
struct Undrawn(bool);

impl ModuleVisitor for Undrawn {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0 |= !param.is_initialized();
    }
}

/// Asks every float tensor for a gradient: only buffers refuse (Note [Parameters, buffers and
/// frozen]).
struct AskGradients;

impl ModuleMapper for AskGradients {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        param.set_require_grad(true)
    }
}

/// An int or bool tensor: its name, shape and kind, and its bytes.
struct Discrete {
    info: ParamInfo,
    kind: StateKind,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct DiscreteWalker {
    path: Vec<String>,
    found: Vec<Discrete>,
}

impl DiscreteWalker {
    fn push(&mut self, data: TensorData, bool_tensor: bool) {
        let dtype = data.dtype();
        self.found.push(Discrete {
            info: ParamInfo {
                name: self.path.join("."),
                shape: data.shape().as_slice().to_vec(),
            },
            kind: match bool_tensor {
                true => StateKind::Bool(format!("{dtype:?}")),
                false => StateKind::Int(format!("{dtype:?}")),
            },
            bytes: data.as_bytes().to_vec(),
        });
    }
}

impl ModuleVisitor for DiscreteWalker {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<D, Int>>) {
        self.push(param.val().into_data(), false);
    }

    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<D, Bool>>) {
        self.push(param.val().into_data(), true);
    }
}

struct DiscreteSetter {
    values: std::vec::IntoIter<Vec<u8>>,
}

impl ModuleMapper for DiscreteSetter {
    fn map_int<const D: usize>(&mut self, param: Param<Tensor<D, Int>>) -> Param<Tensor<D, Int>> {
        match self.values.next() {
            Some(bytes) => param.map(|old| with_bytes(old, bytes)),
            None => param,
        }
    }

    fn map_bool<const D: usize>(
        &mut self,
        param: Param<Tensor<D, Bool>>,
    ) -> Param<Tensor<D, Bool>> {
        match self.values.next() {
            Some(bytes) => param.map(|old| with_bytes(old, bytes)),
            None => param,
        }
    }
}

/// A tensor like `old` (device, dtype, shape) holding `bytes`.
fn with_bytes<const D: usize, K: Basic>(old: Tensor<D, K>, bytes: Vec<u8>) -> Tensor<D, K> {
    let (device, dtype, shape) = (old.device(), old.dtype(), old.shape());
    Tensor::from_data(
        TensorData::from_bytes_vec(bytes, shape, dtype),
        (&device, dtype),
    )
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

struct ShapedSetter<'a> {
    path: Vec<String>,
    values: HashMap<String, (&'a [f32], &'a [usize])>,
}

impl ModuleMapper for ShapedSetter<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let Some(&(value, shape)) = self.values.get(&self.path.join(".")) else {
            return param;
        };
        param.map(|old| {
            let device = old.device();
            let (dtype, require_grad) = (old.dtype(), old.is_require_grad());
            drop(old);
            let shape = match shape.is_empty() {
                true => Shape::from(vec![0; D]),
                false => Shape::from(shape.to_vec()),
            };
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
