//! SGD as in the seed recipe (`optim.SGD(model.parameters(), lr=0.01)`), on Burn's optimizer.

use burn::module::Module;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig};

/// Hyper-parameters of [`Sgd`], PyTorch's names and defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdOptions {
    /// Learning rate (0.01 in the seed recipe).
    pub lr: f64,
    /// Momentum factor; 0 disables it. Dampening is 0, as in PyTorch.
    pub momentum: f64,
    /// L2 penalty added to the gradient; 0 disables it.
    pub weight_decay: f32,
}

impl Default for SgdOptions {
    fn default() -> Self {
        SgdOptions {
            lr: 0.01,
            momentum: 0.0,
            weight_decay: 0.0,
        }
    }
}

/// Stochastic gradient descent over a whole module.
#[derive(Clone)]
pub struct Sgd {
    optim: ModuleOptimizer,
    options: SgdOptions,
}

impl std::fmt::Debug for Sgd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sgd")
            .field("options", &self.options)
            .finish()
    }
}

impl Sgd {
    /// A fresh optimizer (no momentum state yet).
    pub fn new(options: SgdOptions) -> Self {
        let momentum = (options.momentum != 0.0).then(|| {
            MomentumConfig::new()
                .with_momentum(options.momentum)
                .with_dampening(0.0)
        });
        let weight_decay =
            (options.weight_decay != 0.0).then(|| WeightDecayConfig::new(options.weight_decay));
        let optim = SgdConfig::new()
            .with_momentum(momentum)
            .with_weight_decay(weight_decay)
            .init();
        Sgd { optim, options }
    }

    /// The hyper-parameters.
    pub fn options(&self) -> &SgdOptions {
        &self.options
    }

    /// One update: `param -= lr * grad` (with momentum and weight decay when enabled).
    pub fn step<M: Module>(&mut self, module: M, grads: GradientsParams) -> M {
        self.optim.step(self.options.lr, module, grads)
    }

    /// Burn's optimizer, for checkpointing its state.
    pub fn inner(&self) -> &ModuleOptimizer {
        &self.optim
    }
}
