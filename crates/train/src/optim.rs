//! SGD as in the seed recipe (`optim.SGD(model.parameters(), lr=0.01)`), on Burn's optimizer.

use burn::module::Module;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, ModuleOptimizer, OptimizerRecord, SgdConfig};
use burn::tensor::Bytes;

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

    /// Burn's optimizer.
    pub fn inner(&self) -> &ModuleOptimizer {
        &self.optim
    }

    /// The optimizer's state (momentum buffers) in Burn's burnpack format, keyed by parameter
    /// id; `None` when there is none (plain SGD, or no step taken yet). Ids are stable across
    /// processes ([`crate::Mlp::new`]), so a resumed run maps the buffers onto its parameters.
    pub fn state_bytes(&self) -> Result<Option<Vec<u8>>, String> {
        let record = self.optim.to_record();
        if record.is_empty() {
            return Ok(None);
        }
        let bytes = record.into_bytes().map_err(|e| e.to_string())?;
        Ok(Some(bytes.to_vec()))
    }

    /// Restores the state written by [`state_bytes`](Self::state_bytes).
    pub fn load_state(&mut self, bytes: Vec<u8>) -> Result<(), String> {
        let record =
            OptimizerRecord::from_bytes(Bytes::from_bytes_vec(bytes)).map_err(|e| e.to_string())?;
        self.optim = self.optim.clone().load_record(record);
        Ok(())
    }
}
