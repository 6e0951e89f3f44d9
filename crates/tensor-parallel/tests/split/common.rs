//! What the tests of split layers share: each rank thread's own autodiff leaves, values, and
//! the comparison against the whole layers.

use burn::module::Param;
use burn::tensor::{Gradients, Tensor};

/// `t` as a new leaf of the autodiff graph. The rank threads share one process, and Burn joins
/// the graphs that share a node into one, under one lock: a rank's backward waiting in `f`'s
/// all-reduce would hold the lock the other ranks' backward needs. Each rank's tensors are its
/// own, as they are in the processes of a real job.
pub(crate) fn fresh<const N: usize>(t: &Tensor<N>) -> Tensor<N> {
    Tensor::from_data(t.to_data(), &t.device())
}

pub(crate) fn values<const N: usize>(t: Tensor<N>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_into_vec().unwrap()
}

pub(crate) fn grad<const N: usize>(p: &Param<Tensor<N>>, grads: &Gradients) -> Tensor<N> {
    p.val().grad(grads).expect("a gradient")
}

/// Every value of `got` within 1e-5 of `want`'s.
pub(crate) fn assert_close(what: &str, got: Vec<f32>, want: Vec<f32>) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-5, "{what}: differs by {worst}");
}
