//! What the tests of split layers share: each rank thread's own autodiff leaves, values, and
//! the comparison against the whole layers.

use std::ops::Range;

use burn::module::Param;
use burn::nn::Linear;
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

/// A block's split pair `(fc, proj)` against the whole one: each rank's gradients are the
/// slices of the whole ones at its columns `cols` (the proj's bias whole).
pub(crate) fn assert_pair_grads(
    b: usize,
    split: (&Linear, &Linear),
    whole: (&Linear, &Linear),
    grads: (&Gradients, &Gradients),
    cols: Range<usize>,
) {
    let ((fc_s, proj_s), (fc, proj), (g_split, g_whole)) = (split, whole, grads);
    let d = fc.weight.dims()[0];
    assert_close(
        &format!("block {b} fc weight"),
        values(grad(&fc_s.weight, g_split)),
        values(grad(&fc.weight, g_whole).slice([0..d, cols.clone()])),
    );
    assert_close(
        &format!("block {b} fc bias"),
        values(grad(fc_s.bias.as_ref().unwrap(), g_split)),
        values(grad(fc.bias.as_ref().unwrap(), g_whole).slice([cols.clone()])),
    );
    assert_close(
        &format!("block {b} proj weight"),
        values(grad(&proj_s.weight, g_split)),
        values(grad(&proj.weight, g_whole).slice([cols, 0..d])),
    );
    assert_close(
        &format!("block {b} proj bias"),
        values(grad(proj_s.bias.as_ref().unwrap(), g_split)),
        values(grad(proj.bias.as_ref().unwrap(), g_whole)),
    );
}
