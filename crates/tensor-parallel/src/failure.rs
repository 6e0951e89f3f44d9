//! A collective that fails inside an autodiff graph: a backward step has no error to return.
//!
//! Note [Failures inside a graph]: the regions' collectives run inside Burn's forward and
//! backward, which return tensors, not results. Outside [`catch_failures`] a failed collective
//! panics with a sentence naming the operation, the rank and the cause. Inside it, the failure
//! unwinds to the catcher without the panic hook (no message, no backtrace: the caller gets
//! [`Error::Pg`] and decides, as the fault-tolerant trainer does when a peer died). Burn's
//! graph locks do not poison: an unwound backward leaves its graph to be dropped, and the
//! model's parameters as they were.
//!
//! ```
//! use phalanx_tensor_parallel::catch_failures;
//! let sum = catch_failures(|| 1 + 1).unwrap();
//! assert_eq!(sum, 2);
//! ```

use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use phalanx_pg::ProcessGroup;

use crate::{Error, Result};

thread_local! {
    /// How many [`catch_failures`] this thread is inside.
    static CATCHING: Cell<usize> = const { Cell::new(0) };
}

/// What unwinds from a failed collective to [`catch_failures`].
struct Failed(phalanx_pg::Error);

/// Runs `f` (forwards and backwards through tensor-parallel regions): a collective that fails
/// inside returns its error instead of panicking (Note [Failures inside a graph]). Any other
/// panic goes on unwinding.
pub fn catch_failures<T>(f: impl FnOnce() -> T) -> Result<T> {
    CATCHING.with(|c| c.set(c.get() + 1));
    let result = catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(c.get() - 1));
    match result {
        Ok(value) => Ok(value),
        Err(payload) => match payload.downcast::<Failed>() {
            Ok(failed) => Err(Error::Pg(failed.0)),
            Err(other) => resume_unwind(other),
        },
    }
}

/// The end of an operation whose collective on `group` failed with `e` inside a graph: back
/// to [`catch_failures`], or a panic naming `what` outside it.
pub(crate) fn failed(what: &str, group: &ProcessGroup, e: phalanx_pg::Error) -> ! {
    if CATCHING.with(Cell::get) > 0 {
        resume_unwind(Box::new(Failed(e)));
    }
    panic!(
        "{what}: the collective of rank {} of {} failed: {e}",
        group.rank(),
        group.world_size()
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use burn::tensor::{Device, Tensor};

    use super::*;
    use crate::reduce_from_region;

    /// A region's all-reduce that fails (its peer left) returns the group's error inside
    /// `catch_failures`, and panics naming the operation outside it.
    #[test]
    fn a_failed_collective_in_a_graph_is_an_error_inside_catch_failures() {
        let got = phalanx_testing::spawn_ranks(2, |pg| {
            let pg = Arc::new(pg);
            if pg.rank() == 1 {
                pg.abort("rank 1 left");
                return None;
            }
            let device = Device::flex().autodiff();
            let x = || Tensor::<2>::ones([2, 2], &device).require_grad();
            let caught = catch_failures(|| reduce_from_region(x(), &pg)).map(|_| ());
            let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                reduce_from_region(x(), &pg)
            }))
            .map(|_| ())
            .unwrap_err();
            let message = panicked
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_default();
            Some((caught, message))
        });
        let (caught, message) = got.into_iter().next().flatten().unwrap();
        assert!(matches!(caught, Err(Error::Pg(_))), "{caught:?}");
        assert!(
            message.contains("tensor parallelism's all-reduce: the collective of rank 0 of 2"),
            "{message}"
        );
    }
}
