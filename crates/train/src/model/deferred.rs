//! Deferred initialisation: a model whose every parameter draws its initial values on its own,
//! at its first use, from the seed and its position (Note [Deferred init]), so that a rank
//! draws only the piece of the model it keeps.
//!
//! ```
//! use burn::module::Module;
//! use burn::nn::LinearConfig;
//! use burn::tensor::Device;
//! use phalanx_train::with_deferred_init;
//!
//! let device = Device::flex();
//! let a = with_deferred_init(LinearConfig::new(4, 3).init(&device), 7);
//! let b = with_deferred_init(LinearConfig::new(4, 3).init(&device), 7);
//! // Drawn in another order, with other draws in between: the same values.
//! let bias = b.bias.as_ref().unwrap().val();
//! let _ = burn::tensor::Tensor::<1>::random([9], burn::tensor::Distribution::Default, &device);
//! assert_eq!(a.weight.val().into_data(), b.weight.val().into_data());
//! assert_eq!(a.bias.unwrap().val().into_data(), bias.into_data());
//! ```

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::{Device, Tensor};

// Note [Deferred init]
// Burn draws a parameter's initial values when it is first used, from the device's one
// generator, so a parameter's values depend on every draw before it: a rank that builds only
// its pipeline stage or its tensor-parallel shard would draw other values than a whole build
// unless it drew the whole model first (Note [Whole before cut] in `pipeline/stage.rs`), and
// so held it all once. `with_deferred_init` keeps every parameter undrawn and makes its
// values its own: at its first use it seeds the generator from the run's seed and its
// position in canonical order, then draws. Any piece of the model is then drawn alone, in any
// order, a tensor at a time, and equals the whole build's (FSDP2's meta-device init followed
// by `init_weights` on each shard, here by the seed). A rank's peak at start is what it holds
// plus one tensor (a tensor-parallel rank draws a weight whole, keeps its columns and frees
// the rest). The generator is one per process, so a lock makes each seeding and its draw one
// step when threads draw at once (the tests do).

/// Gives every float parameter of `module` the id of its position (Note [Stable parameter
/// ids]) and initial values of its own: drawn at its first use from the device's generator
/// seeded with `seed` and its position (Note [Deferred init]). `module`'s parameters must be
/// undrawn (as Burn's initialisers leave them).
pub fn with_deferred_init<M: Module>(module: M, seed: u64) -> M {
    let mut mapper = DeferredInit { seed, next: 1 };
    module.map(&mut mapper)
}

/// Draws every parameter of `model` Burn has not drawn yet, in canonical order. The trainer
/// draws what a rank holds before its first step: a deferred parameter drawn inside a step's
/// forward would seed the generator between two dropout masks (Note [Deferred init]).
pub(crate) fn draw_all<M: Module>(model: &M) {
    model.visit(&mut DrawAll);
}

struct DrawAll;

impl ModuleVisitor for DrawAll {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let _ = param.val();
    }
}

/// Held while a deferred parameter seeds the device's generator and draws (Note [Deferred
/// init]).
static DRAWS: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct DeferredInit {
    seed: u64,
    next: u64,
}

impl ModuleMapper for DeferredInit {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let position = self.next;
        self.next += 1;
        let seed = crate::init::SplitMix64::new(self.seed, position).next_u64();
        let (device, shape) = (param.lazy_device(), param.lazy_shape());
        Param::uninitialized(
            ParamId::from(position),
            move |device: &Device, require_grad| {
                // The generator is the process's: the seeding and the draw are one step for
                // every deferred draw, whichever thread makes it.
                let _one_at_a_time = DRAWS.lock().unwrap_or_else(|p| p.into_inner());
                device.seed(seed);
                param.val().set_require_grad(require_grad)
            },
            device,
            true,
            shape,
        )
    }
}
