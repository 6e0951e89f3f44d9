//! The conjugate pair of tensor parallelism as operations of Burn's autodiff graph: `f`
//! ([`copy_to_region`]) and `g` ([`reduce_from_region`]), Megatron-LM's names for them.
//!
//! Note [f and g]
//! A block split by columns then by rows (Note [Tensor parallelism] in `lib.rs`) needs one
//! collective in each direction, and they are each other's transpose:
//! - `f` enters the region: forward, the identity (every rank holds the whole input);
//!   backward, an all-reduce (sum) of the input's gradient, because each rank's columns
//!   contributed a part of it.
//! - `g` leaves the region: forward, an all-reduce (sum) of the ranks' partial outputs (each
//!   rank's rows gave a partial product); backward, the identity (every rank needs the whole
//!   gradient of the output, which it already has).
//!
//! Burn has no gradient hooks, so each is a node of its own in the graph, with one parent and
//! the group as its state; the node runs its collective when Burn's backward reaches it. Every
//! rank builds the same graph, and Burn visits the nodes of a graph in a fixed order (by depth
//! from the root, then a fixed walk of the graph), so the ranks meet in their collectives in the same order. Off the
//! autodiff backend (evaluation), `f` is the identity and `g` the all-reduce.
//!
//! The all-reduce sums `f32` values in the group's fixed order, so the result is the same on
//! every rank, bit for bit (the replicated activations stay replicated).

use std::sync::Arc;

use burn::tensor::{Tensor, TensorData};
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::NoCheckpointing;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};
use burn_autodiff::Autodiff;
use burn_backend::tensor::FloatTensor;
use burn_flex::{Flex, FlexTensor};
use phalanx_core::ReduceOp;
use phalanx_pg::ProcessGroup;

/// The autodiff backend the operations run on: Burn's CPU backend with autodiff.
pub(crate) type Ad = Autodiff<Flex, NoCheckpointing>;

/// The group a node sums over, or the failure it met (a backward step cannot return one).
#[derive(Clone)]
pub(crate) struct Group(pub(crate) Arc<ProcessGroup>);

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Group(rank {} of {})",
            self.0.rank(),
            self.0.world_size()
        )
    }
}

/// `f`'s node: the identity forward, the gradient summed over the group backward.
#[derive(Debug)]
struct CopyToRegion;

impl Backward<Flex, 1> for CopyToRegion {
    type State = Group;

    fn backward(self, ops: Ops<Group, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let g = grads.consume::<Flex>(&ops.node);
        if let Some(parent) = &ops.parents[0] {
            grads.register::<Flex>(parent.id, allreduce(g, &ops.state.0));
        }
    }
}

/// `g`'s node: the sum over the group forward (done before the node is made), the identity
/// backward.
#[derive(Debug)]
struct ReduceFromRegion;

impl Backward<Flex, 1> for ReduceFromRegion {
    type State = ();

    fn backward(self, ops: Ops<(), 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let g = grads.consume::<Flex>(&ops.node);
        if let Some(parent) = &ops.parents[0] {
            grads.register::<Flex>(parent.id, g);
        }
    }
}

/// `f` (Note [f and g]): `x` unchanged, its gradient summed over `group` in the backward.
///
/// # Panics
/// On an autodiff tensor of another backend than Burn's flex without a checkpointing strategy
/// (the one these operations are written for), and when the group's all-reduce fails in the
/// backward (a backward step has no error to return; the process group names the peer), unless
/// run inside [`catch_failures`](crate::catch_failures), which returns that error.
pub fn copy_to_region<const D: usize>(x: Tensor<D>, group: &Arc<ProcessGroup>) -> Tensor<D> {
    if !x.device().is_autodiff() {
        return x;
    }
    let x = into_ad(x);
    let (primitive, guard) = x.into_parts();
    let out = match CopyToRegion
        .prepare::<NoCheckpointing>([guard])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(Group(group.clone()), primitive),
        OpsKind::UnTracked(prep) => prep.finish(primitive),
    };
    Tensor::from_primitive::<Ad>(out)
}

/// `g` (Note [f and g]): `x` summed over `group`, its gradient passed through unchanged.
///
/// # Panics
/// As [`copy_to_region`]; the forward's all-reduce failing panics too (use the process group's
/// timeout to bound it).
pub fn reduce_from_region<const D: usize>(x: Tensor<D>, group: &Arc<ProcessGroup>) -> Tensor<D> {
    if !x.device().is_autodiff() {
        let device = x.device();
        let data = x.into_data();
        let summed = allreduce(FlexTensor::from_data(data), group);
        return Tensor::from_data(summed.into_data(), &device);
    }
    let x = into_ad(x);
    let (primitive, guard) = x.into_parts();
    let summed = allreduce(primitive, group);
    let out = ReduceFromRegion
        .prepare::<NoCheckpointing>([guard])
        .compute_bound()
        .stateless(summed);
    Tensor::from_primitive::<Ad>(out)
}

/// The autodiff primitive of `x`.
pub(crate) fn into_ad<const D: usize>(x: Tensor<D>) -> FloatTensor<Ad> {
    x.try_into_primitive::<Ad>().unwrap_or_else(|e| {
        panic!(
            "tensor parallelism runs on Burn's flex backend with autodiff and no gradient \
             checkpointing strategy: {e:?}"
        )
    })
}

/// `t` summed element-wise over `group`, as `f32`.
fn allreduce(t: FlexTensor, group: &ProcessGroup) -> FlexTensor {
    let data = t.into_data();
    let shape = data.shape().clone();
    let mut values: Vec<f32> = data
        .convert::<f32>()
        .try_into_vec()
        .expect("an f32 tensor's values");
    if let Err(e) = group.allreduce(&mut values, ReduceOp::Sum) {
        crate::failure::failed("tensor parallelism's all-reduce", group, e);
    }
    FlexTensor::from_data(TensorData::new(values, shape))
}
