//! Element-wise reduce kernels.

use phalanx_core::{Element, ReduceOp};

/// `acc[i] = incoming[i] ⊕ acc[i]`: folds this rank's values into a partial result that
/// arrived from earlier ranks (see Note [Canonical reduction order] in `segments`).
#[inline]
pub fn reduce_into<T: Element>(op: ReduceOp, acc: &mut [T], incoming: &[T]) {
    debug_assert_eq!(acc.len(), incoming.len());
    // Monomorphised per op so the inner loop has no branch and vectorises.
    macro_rules! fold {
        ($op:expr) => {
            for (a, b) in acc.iter_mut().zip(incoming) {
                *a = T::reduce($op, *b, *a);
            }
        };
    }
    match op {
        ReduceOp::Sum | ReduceOp::Avg => fold!(ReduceOp::Sum),
        ReduceOp::Min => fold!(ReduceOp::Min),
        ReduceOp::Max => fold!(ReduceOp::Max),
        ReduceOp::Product => fold!(ReduceOp::Product),
        ReduceOp::BAnd => fold!(ReduceOp::BAnd),
        ReduceOp::BOr => fold!(ReduceOp::BOr),
        ReduceOp::BXor => fold!(ReduceOp::BXor),
    }
}

/// The last step of `Avg`: divides by the world size.
pub fn finish<T: Element>(op: ReduceOp, buf: &mut [T], world: usize) {
    if op == ReduceOp::Avg && world > 1 {
        for v in buf.iter_mut() {
            *v = v.div_world(world);
        }
    }
}
