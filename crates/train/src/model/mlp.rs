//! The seed model: `Linear(in, hidden) → ReLU → … → Linear(hidden, classes)`.

use burn::module::{Module, Param, ParamId};
use burn::nn::Linear;
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor, TensorData};
use phalanx_ddp::fsdp::FullyShard;

use crate::init::{uniform, SplitMix64};

/// Sizes of an [`Mlp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlpConfig {
    /// Input features (784 for MNIST, 64 for digits).
    pub input: usize,
    /// Width of every hidden layer.
    pub hidden: usize,
    /// Number of hidden layers (1: the seed's `Linear → ReLU → Linear`).
    pub depth: usize,
    /// Output classes.
    pub classes: usize,
}

impl MlpConfig {
    /// The seed recipe for `input` features and `classes` classes: one hidden layer of 128.
    pub fn seed(input: usize, classes: usize) -> Self {
        MlpConfig {
            input,
            hidden: 128,
            depth: 1,
            classes,
        }
    }

    /// Sets the hidden width.
    pub fn with_hidden(mut self, hidden: usize) -> Self {
        self.hidden = hidden;
        self
    }

    /// Sets the number of hidden layers.
    pub fn with_depth(mut self, depth: usize) -> Self {
        self.depth = depth;
        self
    }

    /// Number of scalar parameters.
    pub fn num_params(&self) -> usize {
        self.layer_dims().iter().map(|(i, o)| i * o + o).sum()
    }

    /// `(d_input, d_output)` of each linear layer, input first.
    pub fn layer_dims(&self) -> Vec<(usize, usize)> {
        let mut dims = Vec::with_capacity(self.depth + 1);
        let mut d = self.input;
        for _ in 0..self.depth {
            dims.push((d, self.hidden));
            d = self.hidden;
        }
        dims.push((d, self.classes));
        dims
    }
}

/// A multi-layer perceptron with ReLU between its linear layers. Parameters are named
/// `layers.{i}.weight` (`[d_input, d_output]`, Burn's layout: PyTorch's transposed) and
/// `layers.{i}.bias`. Each layer is a [`FullyShard`] block: under `--sharding full` it holds
/// only its shard between its own forward and backward (under DDP it is the layer itself).
#[derive(Module, Debug)]
pub struct Mlp {
    /// The linear layers, input first.
    pub layers: Vec<FullyShard<Linear>>,
    /// Features per sample (kept: under full sharding the weights are empty between steps).
    #[module(skip)]
    input: usize,
}

/// A trainable parameter whose id is `id`: the position-based id [`super::with_stable_ids`]
/// gives it too (Note [Stable parameter ids]).
fn stable_param<const D: usize>(id: u64, value: Tensor<D>) -> Param<Tensor<D>> {
    let (_, value, mapper) = Param::from_tensor(value).consume();
    Param::from_mapped_value(ParamId::from(id), value, mapper)
}

impl Mlp {
    /// Builds the model on `device` (use [`crate::device`] for training) with parameters drawn
    /// from `seed` exactly like PyTorch's `nn.Linear` default, `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`
    /// for weights and biases. The same seed gives the same parameters in every process and thread.
    pub fn new(config: &MlpConfig, seed: u64, device: &Device) -> Mlp {
        let layers = config
            .layer_dims()
            .into_iter()
            .enumerate()
            .map(|(i, (d_in, d_out))| {
                let bound = 1.0 / (d_in as f32).sqrt();
                let mut rng = SplitMix64::new(seed, 2 * i as u64);
                let w = uniform(d_in * d_out, bound, &mut rng);
                let mut rng = SplitMix64::new(seed, 2 * i as u64 + 1);
                let b = uniform(d_out, bound, &mut rng);
                FullyShard::new(Linear {
                    weight: stable_param(
                        2 * i as u64 + 1,
                        Tensor::from_data(TensorData::new(w, [d_in, d_out]), device),
                    ),
                    bias: Some(stable_param(
                        2 * i as u64 + 2,
                        Tensor::from_data(TensorData::new(b, [d_out]), device),
                    )),
                })
            })
            .collect();
        Mlp {
            layers,
            input: config.input,
        }
    }

    /// Logits `[batch, classes]` of `input` `[batch, features]`.
    pub fn forward(&self, input: Tensor<2>) -> Tensor<2> {
        let last = self.layers.len() - 1;
        self.layers.iter().enumerate().fold(input, |x, (i, layer)| {
            let y = layer.forward(x, |l: &Linear, x| l.forward(x));
            if i < last {
                relu(y)
            } else {
                y
            }
        })
    }

    /// The device the parameters live on.
    pub fn device(&self) -> Device {
        self.layers[0].block().weight.val().device()
    }
}

impl super::classifier::Classifier for Mlp {
    fn input_dim(&self) -> usize {
        self.input
    }

    fn logits(&self, input: Tensor<2>) -> Tensor<2> {
        self.forward(input)
    }

    fn device(&self) -> Device {
        Mlp::device(self)
    }
}
