//! The `transformer` model of `phalanx train --model transformer`, the PyTorch reference in
//! `shared/anchors/ddp/torch_models.py`: the 28 rows of an image as 28 tokens of 28 pixels,
//! Linear(28,64) + learned position Embedding(28,64) → 2 encoder layers (d_model 64, 4 heads,
//! d_ff 128, GELU, dropout 0.1, post-norm LayerNorm) → mean over tokens → Linear(64,10).

use burn::module::Module;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{Device, Int, Tensor};

use super::cnn::SIDE;

const D_MODEL: usize = 64;

/// The row-token transformer classifier.
#[derive(Module, Debug)]
pub struct Transformer {
    /// Linear(28,64): one row of pixels to one token.
    pub embed: Linear,
    /// Learned position embedding, one per row.
    pub pos: Embedding,
    /// 2 post-norm encoder layers, 4 heads, d_ff 128, GELU, dropout 0.1.
    pub encoder: TransformerEncoder,
    /// Linear(64,classes) on the mean token.
    pub head: Linear,
}

impl Transformer {
    /// Builds the model on `device` for `classes` classes, with Burn's initialisers drawing
    /// from the device's generator (seed it first for a reproducible init).
    pub fn new(classes: usize, device: &Device) -> Transformer {
        Transformer {
            embed: LinearConfig::new(SIDE, D_MODEL).init(device),
            pos: EmbeddingConfig::new(SIDE, D_MODEL).init(device),
            encoder: TransformerEncoderConfig::new(D_MODEL, 128, 4, 2)
                .with_dropout(0.1)
                .with_norm_first(false)
                .init(device),
            head: LinearConfig::new(D_MODEL, classes).init(device),
        }
    }
}

impl super::Classifier for Transformer {
    fn input_dim(&self) -> usize {
        SIDE * SIDE
    }

    fn logits(&self, input: Tensor<2>) -> Tensor<2> {
        let [batch, _] = input.dims();
        let device = input.device();
        let tokens = self.embed.forward(input.reshape([batch, SIDE, SIDE]));
        let positions = Tensor::<1, Int>::arange(0..SIDE as i64, &device).reshape([1, SIDE]);
        let h = tokens + self.pos.forward(positions);
        let h = self.encoder.forward(TransformerEncoderInput::new(h));
        let pooled: Tensor<2> = h.mean_dim(1).reshape([batch, D_MODEL]);
        self.head.forward(pooled)
    }

    fn device(&self) -> Device {
        self.head.weight.val().device()
    }
}
