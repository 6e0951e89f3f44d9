//! Two MLP blocks (Linear → GELU → Linear, with a residual) split by columns then rows on 2
//! and 4 ranks, against the whole blocks on one: the same output, the same input gradient
//! (which needs `f`'s all-reduce in the backward), and each rank's parameter gradients the
//! slices of the whole ones.

use std::sync::Arc;

use burn::module::Param;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::gelu;
use burn::tensor::{Device, Distribution, Tensor};
use phalanx_tensor_parallel::{ColwiseParallel, Error, RowwiseParallel};

use super::common::{assert_close, assert_pair_grads, fresh, values};

const D: usize = 8;
const WIDTH: usize = 32;

fn device() -> Device {
    Device::flex().autodiff()
}

/// The whole blocks and an input, the same on every rank (seeded).
fn whole() -> (Vec<(Linear, Linear)>, Tensor<3>) {
    let device = device();
    device.seed(11);
    let blocks = (0..2)
        .map(|_| {
            (
                LinearConfig::new(D, WIDTH).init(&device),
                LinearConfig::new(WIDTH, D).init(&device),
            )
        })
        .collect();
    let x = Tensor::<3>::random([3, 5, D], Distribution::Default, &device);
    (blocks, x)
}

fn fresh_linear(l: &Linear) -> Linear {
    Linear {
        weight: Param::from_tensor(fresh(&l.weight.val())),
        bias: l.bias.as_ref().map(|b| Param::from_tensor(fresh(&b.val()))),
    }
}

fn check(world: usize) {
    // Built once: the rank threads share one process, and so one random generator.
    let (blocks, x) = whole();
    phalanx_testing::spawn_ranks(world, |pg| {
        let (rank, group) = (pg.rank(), Arc::new(pg));
        // The whole blocks, forward and backward, on each rank.
        let blocks: Vec<(Linear, Linear)> = blocks
            .iter()
            .map(|(fc, proj)| (fresh_linear(fc), fresh_linear(proj)))
            .collect();
        let x = fresh(&x);
        let x_whole = x.clone().require_grad();
        let y_whole = blocks.iter().fold(x_whole.clone(), |h, (fc, proj)| {
            h.clone() + proj.forward(gelu(fc.forward(h)))
        });
        let g_whole = y_whole.clone().powf_scalar(2.0).mean().backward();
        // The split blocks from the same whole ones.
        let split: Vec<(Linear, Linear)> = blocks
            .iter()
            .map(|(fc, proj)| {
                (
                    ColwiseParallel::shard(fc.clone(), rank, world).unwrap(),
                    RowwiseParallel::shard(proj.clone(), rank, world).unwrap(),
                )
            })
            .collect();
        let x_split = x.require_grad();
        let y_split = split.iter().fold(x_split.clone(), |h, (fc, proj)| {
            let inner = gelu(ColwiseParallel::forward(fc, h.clone(), &group));
            h + RowwiseParallel::forward(proj, inner, &group)
        });
        assert_close("output", values(y_split.clone()), values(y_whole));
        let g_split = y_split.powf_scalar(2.0).mean().backward();
        assert_close(
            "input gradient",
            values(x_split.grad(&g_split).unwrap()),
            values(x_whole.grad(&g_whole).unwrap()),
        );
        let cols = rank * WIDTH / world..(rank + 1) * WIDTH / world;
        for (b, ((fc, proj), (fc_s, proj_s))) in blocks.iter().zip(&split).enumerate() {
            assert_pair_grads(
                b,
                (fc_s, proj_s),
                (fc, proj),
                (&g_split, &g_whole),
                cols.clone(),
            );
        }
    });
}

#[test]
fn two_ranks_compute_the_whole_blocks_and_their_gradients() {
    check(2);
}

#[test]
fn four_ranks_compute_the_whole_blocks_and_their_gradients() {
    check(4);
}

#[test]
fn a_size_that_does_not_divide_the_width_is_named() {
    let fc = LinearConfig::new(D, WIDTH).init(&device());
    let err = ColwiseParallel::shard(fc.clone(), 0, 3).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Indivisible {
                len: 32,
                size: 3,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("3 ranks cannot split 32 output columns"),
        "{err}"
    );
    let err = RowwiseParallel::shard(fc, 2, 2).unwrap_err();
    assert!(
        err.to_string()
            .contains("rank 2 is not in a tensor-parallel group of 2"),
        "{err}"
    );
}
