//! The `transformer` model of `phalanx train --model transformer`, the PyTorch reference in
//! `shared/anchors/ddp/torch_models.py`: the 28 rows of an image as 28 tokens of 28 pixels,
//! Linear(28,64) + learned position Embedding(28,64) → 2 encoder layers (d_model 64, 4 heads,
//! d_ff 128, GELU, dropout 0.1, post-norm LayerNorm) → mean over tokens → Linear(64,10).

use burn::module::Module;
use burn::nn::transformer::{TransformerEncoderConfig, TransformerEncoderLayer};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{Device, Int, Tensor};
use phalanx_ddp::fsdp::FullyShard;

use super::cnn::SIDE;

const D_MODEL: usize = 64;

/// The row-token transformer classifier. Each encoder layer is a [`FullyShard`] block (under
/// `--sharding full` it holds only its shard between its own forward and backward); the
/// embeddings and the head are the root's.
#[derive(Module, Debug)]
pub struct Transformer {
    /// Linear(28,64): one row of pixels to one token.
    pub embed: Linear,
    /// Learned position embedding, one per row.
    pub pos: Embedding,
    /// 2 post-norm encoder layers, 4 heads, d_ff 128, GELU, dropout 0.1.
    pub encoder: Encoder,
    /// Linear(64,classes) on the mean token.
    pub head: Linear,
}

/// Burn's `TransformerEncoder` with each layer a [`FullyShard`] block: the same layers, the
/// same forward (layer after layer), the same tensor names (`encoder.layers.{i}.…`).
#[derive(Module, Debug)]
pub struct Encoder {
    /// The encoder layers, input first.
    pub layers: Vec<FullyShard<TransformerEncoderLayer>>,
}

impl Transformer {
    /// Builds the model on `device` for `classes` classes, with Burn's initialisers drawing
    /// from the device's generator (seed it first for a reproducible init).
    pub fn new(classes: usize, device: &Device) -> Transformer {
        Transformer {
            embed: LinearConfig::new(SIDE, D_MODEL).init(device),
            pos: EmbeddingConfig::new(SIDE, D_MODEL).init(device),
            encoder: Encoder {
                layers: TransformerEncoderConfig::new(D_MODEL, 128, 4, 2)
                    .with_dropout(0.1)
                    .with_norm_first(false)
                    .init(device)
                    .layers
                    .into_iter()
                    .map(FullyShard::new)
                    .collect(),
            },
            head: LinearConfig::new(D_MODEL, classes).init(device),
        }
    }
}

impl super::classifier::Classifier for Transformer {
    fn input_dim(&self) -> usize {
        SIDE * SIDE
    }

    fn logits(&self, input: Tensor<2>) -> Tensor<2> {
        let [batch, _] = input.dims();
        let device = input.device();
        let tokens = self.embed.forward(input.reshape([batch, SIDE, SIDE]));
        let positions = Tensor::<1, Int>::arange(0..SIDE as i64, &device).reshape([1, SIDE]);
        let h = tokens + self.pos.forward(positions);
        let h = self.encoder.layers.iter().fold(h, |h, layer| {
            layer.forward(h, |l: &TransformerEncoderLayer, h| l.forward(h, None, None))
        });
        let pooled: Tensor<2> = h.mean_dim(1).reshape([batch, D_MODEL]);
        self.head.forward(pooled)
    }

    fn device(&self) -> Device {
        self.head.weight.val().device()
    }
}
