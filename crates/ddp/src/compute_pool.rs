//! [`on_compute_pool`]: runs a rank's training on a thread of the CPU backend's compute pool.
//!
//! ```
//! // The step, its forward and backward, as a rank runs them: on a worker of the pool.
//! let on_worker = phalanx_ddp::on_compute_pool(|| rayon::current_thread_index().is_some());
//! assert!(on_worker);
//! ```

// Note [Step on the compute pool]: Burn's flex backend spreads an operation over rayon's
// global pool. Called from a thread outside the pool (a program's main thread), every parallel
// operation is injected into the pool while the caller sleeps until a worker has run it: a
// futex wake-up per operation, and, with idle cores, the operation's data moved to another
// core's cache and back. With one thread per rank (ranks = cores, phalanx's default) that was
// 25% of a CNN step on 1 rank (`phalanx bench train --model cnn`, 19.8 ms, against 14.9 ms with
// both threads pinned to one core). Called from a worker, the same operation runs on the
// calling thread (a pool of one) or is shared with the other workers by work stealing, so
// nothing sleeps and results are the same: the kernels' reduction order does not depend on
// which thread runs which piece (vendor/burn-flex/PHALANX.md, Determinism).

use std::sync::Once;

/// Stack of the pool's threads: the step runs on one, so it gets a main thread's 8 MiB rather
/// than a spawned thread's 2 MiB.
const STACK_BYTES: usize = 8 << 20;

/// Runs `f` on a worker of rayon's global pool, the one Burn's CPU backend computes on, and
/// returns its result; `f` runs directly when already on a worker. A panic in `f` resumes in
/// the caller. The pool is built on first use with `RAYON_NUM_THREADS` threads (all cores when
/// unset; `phalanx train` sets each rank's share), unless something built it before.
pub fn on_compute_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    static BUILD: Once = Once::new();
    BUILD.call_once(|| {
        // Fails only if the pool exists already (a first tensor operation built it with
        // rayon's defaults): then the step runs there, on its smaller stacks.
        let _ = rayon::ThreadPoolBuilder::new()
            .stack_size(STACK_BYTES)
            .build_global();
    });
    rayon::scope(|_| f())
}

#[cfg(test)]
mod tests {
    use super::on_compute_pool;

    #[test]
    fn runs_on_a_worker_nests_and_resumes_a_panic_in_the_caller() {
        let outer = on_compute_pool(|| {
            let index = rayon::current_thread_index();
            // Nested: runs where it is, on the same worker.
            let inner = on_compute_pool(rayon::current_thread_index);
            (index, inner)
        });
        assert!(outer.0.is_some(), "the closure ran outside the pool");
        assert_eq!(outer.0, outer.1, "a nested call moved to another thread");
        let caught = std::panic::catch_unwind(|| on_compute_pool(|| panic!("step 7 failed")));
        let message = caught.expect_err("the panic was lost");
        assert_eq!(message.downcast_ref::<&str>(), Some(&"step 7 failed"));
    }
}
