//! The vocabulary split on 2 and 4 ranks against one rank: a token embedding split by rows, a
//! head split by columns and the cross-entropy computed from the split logits
//! (`loss_parallel`), against the whole embedding, head and Burn's cross-entropy: the same
//! embeddings, loss, arg-max, and each rank's parameter gradients the slices of the whole ones.

use std::sync::Arc;

use burn::module::Param;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use phalanx_tensor_parallel::{
    argmax_parallel, loss_parallel, ColwiseParallel, Error, VocabParallelEmbedding,
};

use super::common::{assert_close, fresh, grad, values};

const VOCAB: usize = 16;
const D: usize = 8;
const BATCH: usize = 3;
const SEQ: usize = 5;

fn device() -> Device {
    Device::flex().autodiff()
}

/// Tokens covering every rank's range, and their next tokens.
fn tokens(device: &Device) -> (Tensor<2, Int>, Tensor<1, Int>) {
    let ids: Vec<i64> = (0..BATCH * SEQ)
        .map(|i| ((i * 7 + 3) % VOCAB) as i64)
        .collect();
    let next: Vec<i64> = (0..BATCH * SEQ)
        .map(|i| ((i * 5 + 1) % VOCAB) as i64)
        .collect();
    (
        Tensor::from_data(TensorData::new(ids, [BATCH, SEQ]), device),
        Tensor::from_data(TensorData::new(next, [BATCH * SEQ]), device),
    )
}

fn check(world: usize) {
    // Built once: the rank threads share one process, and so one random generator.
    let device = device();
    device.seed(3);
    let wte: Embedding = EmbeddingConfig::new(VOCAB, D).init(&device);
    let head: Linear = LinearConfig::new(D, VOCAB).with_bias(false).init(&device);
    let scale = Tensor::<3>::random([BATCH, SEQ, D], Distribution::Default, &device);
    phalanx_testing::spawn_ranks(world, |pg| {
        let (rank, group) = (pg.rank(), Arc::new(pg));
        let wte = Embedding {
            weight: Param::from_tensor(fresh(&wte.weight.val())),
        };
        let head = Linear {
            weight: Param::from_tensor(fresh(&head.weight.val())),
            bias: None,
        };
        let scale = fresh(&scale);
        let (ids, next) = tokens(&device);
        // The whole model: embedding, a fixed element-wise scale, head, cross-entropy.
        let e_whole = wte.forward(ids.clone());
        let logits = head
            .forward(e_whole.clone() * scale.clone())
            .reshape([BATCH * SEQ, VOCAB]);
        let predicted = values(logits.clone().argmax(1).reshape([BATCH * SEQ]).float());
        let loss_whole = CrossEntropyLossConfig::new()
            .init(&device)
            .forward(logits, next.clone());
        let g_whole = loss_whole.clone().backward();
        // The split one.
        let wte_s = VocabParallelEmbedding::shard(wte.clone(), rank, world).unwrap();
        let head_s = ColwiseParallel::shard(head.clone(), rank, world).unwrap();
        let e_split = VocabParallelEmbedding::forward(&wte_s, ids, &group);
        assert_close("embeddings", values(e_split.clone()), values(e_whole));
        let local = ColwiseParallel::forward(&head_s, e_split * scale.clone(), &group)
            .reshape([BATCH * SEQ, VOCAB / world]);
        let argmax = argmax_parallel(local.clone(), &group).unwrap();
        assert_eq!(values(argmax.float()), predicted, "arg-max");
        let loss_split = loss_parallel(local, next, &group).unwrap();
        assert_close("loss", values(loss_split.clone()), values(loss_whole));
        let g_split = loss_split.backward();
        let per = VOCAB / world;
        let mine = rank * per..(rank + 1) * per;
        assert_close(
            "embedding gradient",
            values(grad(&wte_s.weight, &g_split)),
            values(grad(&wte.weight, &g_whole).slice([mine.clone(), 0..D])),
        );
        assert_close(
            "head gradient",
            values(grad(&head_s.weight, &g_split)),
            values(grad(&head.weight, &g_whole).slice([0..D, mine])),
        );
    });
}

#[test]
fn two_ranks_split_the_vocabulary_as_one_rank_computes_it() {
    check(2);
}

#[test]
fn four_ranks_split_the_vocabulary_as_one_rank_computes_it() {
    check(4);
}

#[test]
fn a_vocabulary_the_group_does_not_divide_is_named() {
    let wte = EmbeddingConfig::new(10, D).init(&device());
    let err = VocabParallelEmbedding::shard(wte, 0, 4).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Indivisible {
                len: 10,
                size: 4,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("4 ranks cannot split 10 vocabulary rows"),
        "{err}"
    );
}
