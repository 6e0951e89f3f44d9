//! The `cnn` model of `phalanx train --model cnn`, layer for layer the PyTorch reference in
//! `shared/anchors/ddp/torch_models.py`:
//! 1×28×28 → Conv(1,16,3,pad 1) BatchNorm ReLU MaxPool2 → Conv(16,32,3,pad 1) BatchNorm ReLU
//! MaxPool2 → Flatten(1568) → Dropout(0.2) → Linear(1568,64) ReLU → Linear(64,10).

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{
    BatchNorm, BatchNormConfig, Dropout, DropoutConfig, Linear, LinearConfig, PaddingConfig2d,
};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use phalanx_ddp::fsdp::FullyShard;

/// Side of the square input images.
pub(super) const SIDE: usize = 28;

/// The convolutional classifier (Conv2d and Linear initialised like PyTorch's defaults:
/// `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`, Burn's Kaiming-uniform with gain `1/sqrt(3)`).
///
/// The convolutions and the first linear layer are [`FullyShard`] blocks (under `--sharding
/// full` each holds only its shard between its own forward and backward); the BatchNorms and
/// the last layer are the root's.
#[derive(Module, Debug)]
pub struct Cnn {
    /// Conv(1,16,3,pad 1).
    pub conv1: FullyShard<Conv2d>,
    /// BatchNorm(16): its running statistics are DDP buffers.
    pub bn1: BatchNorm,
    /// Conv(16,32,3,pad 1).
    pub conv2: FullyShard<Conv2d>,
    /// BatchNorm(32).
    pub bn2: BatchNorm,
    /// Dropout(0.2) before the first linear layer.
    pub dropout: Dropout,
    /// Linear(1568,64).
    pub fc1: FullyShard<Linear>,
    /// Linear(64,10).
    pub fc2: Linear,
    pool: MaxPool2d,
}

impl Cnn {
    /// Builds the model on `device` for `classes` classes, with Burn's initialisers drawing
    /// from the device's generator (seed it first for a reproducible init).
    pub fn new(classes: usize, device: &Device) -> Cnn {
        let conv = |i, o| {
            Conv2dConfig::new([i, o], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device)
        };
        Cnn {
            conv1: FullyShard::new(conv(1, 16)),
            bn1: BatchNormConfig::new(16).init(device),
            conv2: FullyShard::new(conv(16, 32)),
            bn2: BatchNormConfig::new(32).init(device),
            dropout: DropoutConfig::new(0.2).init(),
            fc1: FullyShard::new(LinearConfig::new(32 * 7 * 7, 64).init(device)),
            fc2: LinearConfig::new(64, classes).init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
        }
    }
}

impl super::classifier::Classifier for Cnn {
    fn input_dim(&self) -> usize {
        SIDE * SIDE
    }

    fn logits(&self, input: Tensor<2>) -> Tensor<2> {
        let [batch, _] = input.dims();
        let x = input.reshape([batch, 1, SIDE, SIDE]);
        let conv = |c: &Conv2d, x| c.forward(x);
        let x = self
            .pool
            .forward(relu(self.bn1.forward(self.conv1.forward(x, conv))));
        let x = self
            .pool
            .forward(relu(self.bn2.forward(self.conv2.forward(x, conv))));
        let x = self.dropout.forward(x.reshape([batch, 32 * 7 * 7]));
        let x = self.fc1.forward(x, |l: &Linear, x| l.forward(x));
        self.fc2.forward(relu(x))
    }

    fn device(&self) -> Device {
        self.fc2.weight.val().device()
    }
}
