//! The forward and backward of a fully sharded block (`FullyShard`, Note [Full sharding] in
//! `fsdp/fully_sharded/mod.rs`) as one custom operation of Burn's autodiff graph: the only code of
//! phalanx that reaches under Burn's tensor API into its autodiff backend.
//!
//! Note [Unit operation]
//! Burn has no forward or backward hooks, and the tensors a backward step needs are held by
//! the graph, so a gathered parameter the graph holds cannot be freed and gathered again the
//! way PyTorch resizes a parameter's storage under its graph. So a block runs as one node of
//! the outer graph, whose inputs are its input `x` and a scalar leaf that makes the node
//! tracked even when `x` is not (the first block's input is the data):
//! - *forward*, with `reshard_after_forward` (the default): the block is rebuilt from its
//!   gathered parameters, run on `x` without tracking (so nothing of it is kept), and
//!   dropped: its parameters are freed at once. The node keeps `x` and the seed it gave the
//!   device's generator, so that dropout draws the same masks again (Note [Block seeds] in
//!   `fsdp/fully_shard.rs`).
//! - *backward*: the parameters are gathered again, the block rebuilt with parameters that
//!   take gradients, its forward recomputed on `x` as the leaf of a graph of its own (a nested
//!   backward inside a backward step: Burn's graphs take it, each has its own lock), and that
//!   graph's backward run from the output's gradient `g` (`sum(y ⊙ g)` has gradient `g`
//!   exactly). The block's parameter gradients go to the unit's reduce-scatter at once, the
//!   input's gradient to the outer graph. Buffers the recomputation updated (BatchNorm's
//!   running statistics) are put back as the forward left them.
//! - without `reshard_after_forward`, the forward is tracked in the block's own graph and the
//!   node keeps that graph (and with it the gathered parameters) until its backward: no
//!   second gather, no recomputation, the generator untouched (FSDP2's
//!   `reshard_after_forward=False`).
//!
//! The recomputation is activation checkpointing of the block (its activations are not kept
//! between forward and backward either), which FSDP users commonly add to FSDP anyway. The
//! gradients are bitwise those of one graph over the same forward: the same operations in the
//! same order (only an input with three or more consumers across the block's boundary could
//! sum its gradients in another order).

use std::sync::{Arc, Mutex};

use burn::module::Module;
use burn::tensor::{Device, Gradients, Tensor, TensorData};
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::NoCheckpointing;
use burn_autodiff::grads::Gradients as GraphGradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};
use burn_autodiff::Autodiff;
use burn_backend::tensor::FloatTensor;
use burn_flex::{Flex, FlexTensor};

use super::burn::{
    floats_to_flat, flush_running_state, set_floats_by_name, set_floats_in_order, state_infos,
    GradTable, Shaped,
};
use super::StateKind;
use crate::hook::BucketBuffer;

/// The autodiff backend a unit operation runs on: Burn's CPU backend with autodiff.
type Ad = Autodiff<Flex, NoCheckpointing>;
/// Its tensors.
type AdTensor = FloatTensor<Ad>;

/// Which pass asks for a unit's parameters (the unit prefetches the next unit's for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Before the block's forward.
    Forward,
    /// Before its recomputation in backward.
    Backward,
}

/// What a sharded unit does around its block: gathering parameters from their owners and
/// taking the gradients to their reduce-scatter (implemented by `fsdp`'s unit state).
pub(crate) trait UnitComm: Send + Sync + std::fmt::Debug + 'static {
    /// The whole values and shapes of the block's trainable parameters, in visiting order.
    fn gather(&self, pass: Pass) -> Vec<Shaped>;
    /// Which of the block's float tensors (in visiting order) are its trainable parameters.
    fn trainable(&self) -> &[bool];
    /// This step's gradient of each of the block's trainable parameters (`None`: unused),
    /// in visiting order.
    fn reduce(&self, grads: Vec<Option<BucketBuffer>>);
    /// Whether the forward frees the parameters (Note [Unit operation]).
    fn reshard_after_forward(&self) -> bool;
    /// The seed of the device's generator for this forward of the block.
    fn next_seed(&self) -> u64;
    /// Records a failure in a pass that cannot return one (a backward step): the engine's
    /// next call returns it.
    fn fail(&self, reason: String);
}

/// The backward of one forward of a block, type-erased.
trait UnitGrad: Send + Sync {
    /// The gradient of the block's input from its output's gradient `g`; hands the
    /// parameters' gradients to the unit.
    fn backward(&self, g: FlexTensor) -> Option<FlexTensor>;
}

/// The block, its forward and its unit.
struct Block<B, F> {
    /// Behind a lock only to be shared between threads (a module is `Send`, not `Sync`).
    skeleton: Arc<Mutex<B>>,
    f: Arc<F>,
    comm: Arc<dyn UnitComm>,
    device: Device,
}

impl<B: Clone, F> Clone for Block<B, F> {
    fn clone(&self) -> Self {
        Block {
            skeleton: self.skeleton.clone(),
            f: self.f.clone(),
            comm: self.comm.clone(),
            device: self.device.clone(),
        }
    }
}

impl<B: Module + 'static, F> Block<B, F> {
    /// The block with its gathered parameters, taking gradients or not.
    fn rebuilt(&self, pass: Pass, grad: bool) -> B {
        let values = self.comm.gather(pass);
        let skeleton = self.skeleton.lock().expect("not poisoned").clone();
        let block = set_floats_in_order(skeleton, self.comm.trainable(), values);
        match grad {
            true => block,
            false => block.no_grad(),
        }
    }

    /// Each trainable parameter's gradient in `grads`, flat, in Burn's own memory (taken out
    /// of `grads` without a copy where the backend allows; `None`: unused).
    fn param_grads(&self, block: &B, grads: &mut Gradients) -> Vec<Option<BucketBuffer>> {
        let table = GradTable::new(block);
        (0..table.len())
            .map(|p| match table.lend_grad(p, grads) {
                Ok(g) => g,
                Err(e) => {
                    self.comm.fail(e.to_string());
                    None
                }
            })
            .collect()
    }
}

/// A recomputing backward: the input and the seed of the forward.
struct Recompute<B, F, const D: usize, const E: usize> {
    block: Block<B, F>,
    x: FlexTensor,
    seed: Option<u64>,
}

impl<B, F, const D: usize, const E: usize> UnitGrad for Recompute<B, F, D, E>
where
    B: Module + 'static,
    F: Fn(&B, Tensor<D>) -> Tensor<E> + Send + Sync + 'static,
{
    fn backward(&self, g: FlexTensor) -> Option<FlexTensor> {
        let block = self.block.rebuilt(Pass::Backward, true);
        // What the forward left in the buffers, put back after the recomputation.
        let buffers = BufferValues::of(&block);
        let x = Tensor::<D>::from_primitive::<Ad>(AdTensor::new(self.x.clone())).require_grad();
        if let Some(seed) = self.seed {
            self.block.device.seed(seed);
        }
        let y = (self.block.f)(&block, x.clone());
        let g = Tensor::<E>::from_primitive::<Ad>(AdTensor::new(g));
        let mut grads = (y * g).sum().backward();
        buffers.restore(&block);
        let per_param = self.block.param_grads(&block, &mut grads);
        // The gathered parameters go before the reduce-scatter's packed buffer comes: a
        // block's whole parameters, its gradients and their packed copy never live together.
        drop(block);
        self.block.comm.reduce(per_param);
        x.grad(&grads)?.try_into_primitive::<Flex>().ok()
    }
}

/// A kept graph's backward (no `reshard_after_forward`): the block, its input leaf and its
/// output, taken once.
struct Kept<B, F, const D: usize, const E: usize> {
    block: Block<B, F>,
    graph: Mutex<Option<(B, Tensor<D>, Tensor<E>)>>,
}

impl<B, F, const D: usize, const E: usize> UnitGrad for Kept<B, F, D, E>
where
    B: Module + 'static,
    F: Send + Sync + 'static,
{
    fn backward(&self, g: FlexTensor) -> Option<FlexTensor> {
        let (block, x, y) = self.graph.lock().expect("not poisoned").take()?;
        let g = Tensor::<E>::from_primitive::<Ad>(AdTensor::new(g));
        let mut grads = (y * g).sum().backward();
        let per_param = self.block.param_grads(&block, &mut grads);
        drop(block); // as in a recomputing backward
        self.block.comm.reduce(per_param);
        x.grad(&grads)?.try_into_primitive::<Flex>().ok()
    }
}

/// The values of a block's buffers, to put back after a recomputation updated them.
struct BufferValues {
    names: Vec<String>,
    values: Vec<Vec<f32>>,
}

impl BufferValues {
    fn of<B: Module>(block: &B) -> BufferValues {
        let floats: Vec<_> = state_infos(block)
            .into_iter()
            .filter(|s| s.kind.is_float())
            .collect();
        let positions: Vec<usize> = (0..floats.len())
            .filter(|&i| floats[i].kind == StateKind::Buffer)
            .collect();
        if positions.is_empty() {
            return BufferValues {
                names: Vec::new(),
                values: Vec::new(),
            };
        }
        flush_running_state(block);
        BufferValues {
            names: positions
                .iter()
                .map(|&i| floats[i].info.name.clone())
                .collect(),
            values: floats_to_flat(block, &positions).unwrap_or_default(),
        }
    }

    fn restore<B: Module>(&self, block: &B) {
        if self.names.is_empty() || self.values.len() != self.names.len() {
            return;
        }
        flush_running_state(block);
        let by_name = self
            .names
            .iter()
            .cloned()
            .zip(self.values.iter().map(Vec::as_slice))
            .collect();
        // Writes into the running states' shared storage (Note [Parameters, buffers and
        // frozen] in `burn.rs`): the skeleton sees these values again.
        drop(set_floats_by_name(block.clone(), by_name));
    }
}

/// The outer graph's node of one forward of a block.
#[derive(Debug)]
struct UnitBackward;

/// What the node keeps until its backward.
#[derive(Clone)]
struct Saved(Arc<dyn UnitGrad>);

impl std::fmt::Debug for Saved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Saved(unit)")
    }
}

impl Backward<Flex, 2> for UnitBackward {
    type State = Saved;

    fn backward(self, ops: Ops<Saved, 2>, grads: &mut GraphGradients, _: &mut Checkpointer) {
        let g = grads.consume::<Flex>(&ops.node);
        let gx = ops.state.0.backward(g);
        if let (Some(parent), Some(gx)) = (&ops.parents[0], gx) {
            grads.register::<Flex>(parent.id, gx);
        }
    }
}

/// Runs `f(block, x)` for a sharded unit (Note [Unit operation]): plainly when `x` is not an
/// autodiff tensor (evaluation), else as one node of the outer graph.
///
/// # Panics
/// When `x` lives on another backend than Burn's flex with autodiff and no gradient
/// checkpointing strategy (the only one this operation is written for).
pub(crate) fn unit_forward<B, F, const D: usize, const E: usize>(
    skeleton: &B,
    comm: Arc<dyn UnitComm>,
    x: Tensor<D>,
    f: Arc<F>,
    seeds: Option<(u64, u64)>,
) -> Tensor<E>
where
    B: Module + 'static,
    F: Fn(&B, Tensor<D>) -> Tensor<E> + Send + Sync + 'static,
{
    let device = x.device();
    if !device.is_autodiff() {
        let values = comm.gather(Pass::Forward);
        let block = set_floats_in_order(skeleton.clone(), comm.trainable(), values);
        return f(&block, x);
    }
    let x = x.try_into_primitive::<Ad>().unwrap_or_else(|e| {
        panic!(
            "FullyShard runs on Burn's flex backend with autodiff and no gradient checkpointing \
             strategy: {e:?}"
        )
    });
    let block = Block {
        skeleton: Arc::new(Mutex::new(skeleton.clone())),
        f,
        comm: comm.clone(),
        device: device.clone(),
    };
    // The scalar leaf that makes the node tracked whatever `x` is.
    let anchor =
        AdTensor::new(FlexTensor::from_data(TensorData::new(vec![0f32], [1]))).require_grad();
    let (x_primitive, x_guard) = x.into_parts();
    let (y, grad): (FlexTensor, Arc<dyn UnitGrad>) = match comm.reshard_after_forward() {
        true => {
            // The step's seeds (Note [Block seeds] in `fsdp/fully_shard.rs`), or the unit's.
            let (seed, after) = match seeds {
                Some((before, after)) => (before, Some(after)),
                None => (comm.next_seed(), None),
            };
            let built = block.rebuilt(Pass::Forward, false);
            let input = Tensor::<D>::from_primitive::<Ad>(AdTensor::new(x_primitive.clone()));
            device.seed(seed);
            let y = (block.f)(&built, input);
            if let Some(after) = after {
                device.seed(after);
            }
            flush_running_state(&built);
            drop(built);
            let grad = Recompute::<B, F, D, E> {
                block,
                x: x_primitive,
                seed: Some(seed),
            };
            (into_flex(y.detach()), Arc::new(grad))
        }
        false => {
            let built = block.rebuilt(Pass::Forward, true);
            let input =
                Tensor::<D>::from_primitive::<Ad>(AdTensor::new(x_primitive)).require_grad();
            if let Some((before, _)) = seeds {
                device.seed(before);
            }
            let y = (block.f)(&built, input.clone());
            if let Some((_, after)) = seeds {
                device.seed(after);
            }
            flush_running_state(&built);
            let out = into_flex(y.clone().detach());
            let grad = Kept::<B, F, D, E> {
                block,
                graph: Mutex::new(Some((built, input, y))),
            };
            (out, Arc::new(grad))
        }
    };
    let out = match UnitBackward
        .prepare::<NoCheckpointing>([x_guard, anchor.node()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(Saved(grad), y),
        OpsKind::UnTracked(prep) => prep.finish(y),
    };
    Tensor::<E>::from_primitive::<Ad>(out)
}

/// Whether a fully sharded block can run on `device`: Burn's flex backend (with autodiff, no
/// gradient checkpointing strategy), which the unit operation is written for.
pub(crate) fn supports(device: &Device) -> bool {
    let x = Tensor::<1>::zeros([1], &device.clone().autodiff());
    x.try_into_primitive::<Ad>().is_ok()
}

/// The flex primitive of an autodiff tensor's value.
fn into_flex<const E: usize>(y: Tensor<E>) -> FlexTensor {
    y.try_into_primitive::<Ad>()
        .expect("a unit's output is an autodiff tensor of the flex backend")
        .into_primitive()
}
