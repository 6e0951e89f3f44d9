//! burn-train's gradients handed back to autodiff's container, for DDP.
//!
//! Note [Gradients through the Learner]: a Learner program's `TrainStep::step` ends in
//! `TrainOutput::new(self, loss.backward(), item)`, which turns autodiff's `Gradients` into the
//! optimizer's `GradientsParams` (keyed by parameter id) before the strategy sees them.
//! `DistributedDataParallel` reads autodiff's `Gradients` (keyed by the parameter's autodiff
//! node) through its adapter. Burn has no way back from `GradientsParams`, and there is no public
//! constructor of an empty `Gradients`; but the backward of a throwaway one-element leaf gives a
//! container holding only that leaf's gradient, and `Tensor::grad_replace` inserts each
//! parameter's gradient under the parameter's own node. DDP looks up the module's parameters
//! only, so the throwaway entry is never read. A parameter absent from `GradientsParams`
//! (frozen, or unused in this step) stays absent: DDP treats it as unused, as it would have.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Gradients, Tensor};

/// Moves every gradient of `params` that belongs to a parameter of `module` into an autodiff
/// `Gradients` container (Note [Gradients through the Learner]). `device` is the autodiff
/// device the model trains on.
pub(crate) fn to_autodiff<M: Module>(
    module: &M,
    mut params: GradientsParams,
    device: &Device,
) -> Gradients {
    let leaf = Tensor::<1>::zeros([1], device).require_grad();
    let mut grads = leaf.sum().backward();
    module.visit(&mut Insert {
        params: &mut params,
        grads: &mut grads,
    });
    grads
}

struct Insert<'a> {
    params: &'a mut GradientsParams,
    grads: &'a mut Gradients,
}

impl ModuleVisitor for Insert<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.params.remove::<D>(param.id) {
            param.val().grad_replace(self.grads, grad);
        }
    }
}
