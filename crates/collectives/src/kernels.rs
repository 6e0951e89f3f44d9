//! Element-wise reduce kernels.

use phalanx_core::{Element, ReduceOp};

/// Runs `$body` with `$o` a constant `ReduceOp` equal to `$op` (`Sum` for `Avg`, whose
/// division comes last): one arm per op, so each inner loop is monomorphised, has no branch
/// and vectorises.
macro_rules! by_op {
    ($op:expr, $o:ident => $body:expr) => {
        match $op {
            ReduceOp::Sum | ReduceOp::Avg => {
                const $o: ReduceOp = ReduceOp::Sum;
                $body
            }
            ReduceOp::Min => {
                const $o: ReduceOp = ReduceOp::Min;
                $body
            }
            ReduceOp::Max => {
                const $o: ReduceOp = ReduceOp::Max;
                $body
            }
            ReduceOp::Product => {
                const $o: ReduceOp = ReduceOp::Product;
                $body
            }
            ReduceOp::BAnd => {
                const $o: ReduceOp = ReduceOp::BAnd;
                $body
            }
            ReduceOp::BOr => {
                const $o: ReduceOp = ReduceOp::BOr;
                $body
            }
            ReduceOp::BXor => {
                const $o: ReduceOp = ReduceOp::BXor;
                $body
            }
        }
    };
}

/// `acc[i] = incoming[i] ⊕ acc[i]`: folds this rank's values into a partial result that
/// arrived from earlier ranks (see Note [Canonical reduction order] in `segments`).
#[inline]
pub fn reduce_into<T: Element>(op: ReduceOp, acc: &mut [T], incoming: &[T]) {
    debug_assert_eq!(acc.len(), incoming.len());
    by_op!(op, O => {
        for (a, b) in acc.iter_mut().zip(incoming) {
            *a = T::reduce(O, *b, *a);
        }
    })
}

/// `dst[i] = second[i] ⊕ first[i]`: the first two steps of a canonical fold in one pass (the
/// same operations, in the same order, as copying `first` then [`reduce_into`]).
#[inline]
pub(crate) fn reduce2<T: Element>(op: ReduceOp, dst: &mut [T], first: &[T], second: &[T]) {
    by_op!(op, O => {
        for ((d, a), b) in dst.iter_mut().zip(first).zip(second) {
            *d = T::reduce(O, *b, *a);
        }
    })
}

/// `dst[i] = dst[i] ⊕ acc[i]`: the last step of a canonical fold whose last rank's values
/// are in `dst` (⊕ commutes bitwise, so this equals folding `dst` onto `acc`).
#[inline]
pub fn reduce_last<T: Element>(op: ReduceOp, dst: &mut [T], acc: &[T]) {
    by_op!(op, O => {
        for (d, a) in dst.iter_mut().zip(acc) {
            *d = T::reduce(O, *d, *a);
        }
    })
}

/// The last step of `Avg`: divides by the world size.
pub fn finish<T: Element>(op: ReduceOp, buf: &mut [T], world: usize) {
    if op == ReduceOp::Avg && world > 1 {
        for v in buf.iter_mut() {
            *v = v.div_world(world);
        }
    }
}
