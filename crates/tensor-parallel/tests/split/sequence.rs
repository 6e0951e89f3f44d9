//! Two pre-norm MLP blocks (LayerNorm → Linear → GELU → Linear, with a residual) under
//! sequence parallelism on 2 and 4 ranks, against the whole blocks on one: each rank's
//! positions of the output and of the input's gradient, and the whole gradients of the
//! parameters used between the regions (the LayerNorm's, the row-split bias), which need `f`'s
//! sum over the positions of every rank.

use std::sync::Arc;

use burn::module::Param;
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::gelu;
use burn::tensor::{Device, Distribution, Tensor};
use phalanx_tensor_parallel::{ColwiseParallel, RowwiseParallel, SequenceParallel};

use super::common::{assert_close, assert_pair_grads, fresh, grad, values};

const D: usize = 8;
const WIDTH: usize = 32;
const SEQ: usize = 8;
/// Burn's default LayerNorm epsilon, which the blocks are built with.
const EPS: f64 = 1e-5;

type Pre = (LayerNorm, Linear, Linear);

fn whole() -> (Vec<Pre>, Tensor<3>) {
    let device = Device::flex().autodiff();
    device.seed(5);
    let blocks = (0..2)
        .map(|_| {
            let mut norm = LayerNormConfig::new(D).with_epsilon(EPS).init(&device);
            // Not ones and zeros: a gradient that only the whole sequence's sum gets right.
            norm.gamma = Param::from_tensor(Tensor::random([D], Distribution::Default, &device));
            norm.beta = Some(Param::from_tensor(Tensor::random(
                [D],
                Distribution::Default,
                &device,
            )));
            (
                norm,
                LinearConfig::new(D, WIDTH).init(&device),
                LinearConfig::new(WIDTH, D).init(&device),
            )
        })
        .collect();
    let x = Tensor::<3>::random([3, SEQ, D], Distribution::Default, &device);
    (blocks, x)
}

fn fresh_block((norm, fc, proj): &Pre) -> Pre {
    let linear = |l: &Linear| Linear {
        weight: Param::from_tensor(fresh(&l.weight.val())),
        bias: l.bias.as_ref().map(|b| Param::from_tensor(fresh(&b.val()))),
    };
    let mut n = norm.clone();
    n.gamma = Param::from_tensor(fresh(&norm.gamma.val()));
    n.beta = norm
        .beta
        .as_ref()
        .map(|b| Param::from_tensor(fresh(&b.val())));
    (n, linear(fc), linear(proj))
}

fn check(world: usize) {
    let (blocks, x) = whole();
    phalanx_testing::spawn_ranks(world, |pg| {
        let (rank, group) = (pg.rank(), Arc::new(pg));
        let blocks: Vec<Pre> = blocks.iter().map(fresh_block).collect();
        let x_whole = fresh(&x).require_grad();
        let y_whole = blocks.iter().fold(x_whole.clone(), |h, (norm, fc, proj)| {
            h.clone() + proj.forward(gelu(fc.forward(norm.forward(h))))
        });
        // Sum of squares, not a mean: each rank's part of it is its positions' sum.
        let g_whole = y_whole.clone().powf_scalar(2.0).sum().backward();

        let split: Vec<Pre> = blocks
            .iter()
            .map(|(norm, fc, proj)| {
                (
                    fresh_block(&(norm.clone(), fc.clone(), proj.clone())).0,
                    ColwiseParallel::shard(fc.clone(), rank, world).unwrap(),
                    RowwiseParallel::shard(proj.clone(), rank, world).unwrap(),
                )
            })
            .collect();
        let x_split = fresh(&x).require_grad();
        let mine = SequenceParallel::shard(x_split.clone(), &group).unwrap();
        let y_split = split.iter().fold(mine, |h, (norm, fc, proj)| {
            let normed = SequenceParallel::layer_norm(norm, EPS, h.clone(), &group);
            let inner = gelu(ColwiseParallel::forward_from_shards(fc, normed, &group));
            h + RowwiseParallel::forward_to_shards(proj, inner, &group)
        });
        let positions = SequenceParallel::range(SEQ, &group).unwrap();
        let ours = |t: Tensor<3>| t.slice([0..3, positions.clone(), 0..D]);
        assert_close(
            "output",
            values(y_split.clone()),
            values(ours(y_whole.clone())),
        );
        let g_split = y_split.powf_scalar(2.0).sum().backward();
        assert_close(
            "input gradient at this rank's positions",
            values(ours(x_split.grad(&g_split).unwrap())),
            values(ours(x_whole.grad(&g_whole).unwrap())),
        );
        let cols = rank * WIDTH / world..(rank + 1) * WIDTH / world;
        for (b, ((norm, fc, proj), (_, fc_s, proj_s))) in blocks.iter().zip(&split).enumerate() {
            assert_close(
                &format!("block {b} norm weight"),
                values(grad(&split[b].0.gamma, &g_split)),
                values(grad(&norm.gamma, &g_whole)),
            );
            assert_close(
                &format!("block {b} norm bias"),
                values(grad(split[b].0.beta.as_ref().unwrap(), &g_split)),
                values(grad(norm.beta.as_ref().unwrap(), &g_whole)),
            );
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
fn two_ranks_on_sequence_shards_compute_the_whole_blocks_and_their_gradients() {
    check(2);
}

#[test]
fn four_ranks_on_sequence_shards_compute_the_whole_blocks_and_their_gradients() {
    check(4);
}
