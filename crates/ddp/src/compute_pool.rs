//! [`on_compute_pool`]: runs a rank's training on a thread of the CPU backend's compute pool,
//! whose other threads keep looking for work while it runs (Note [Warm pool]).
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

// Note [Warm pool]: with more than one thread in the pool (one rank given several cores), a
// step is hundreds of operations, most of them split between the threads for tens of
// microseconds, with serial work (autodiff bookkeeping, allocation, small operations) between
// them. Rayon's idle workers yield for a few microseconds and then sleep on a futex, so nearly
// every split woke a sleeping thread and waited for it: on 1 rank with 2 threads, futex
// wake-ups were 7.6% of a transformer step, the second thread did 12% of the work, and the
// step was slower than on one thread (13.3 against 11.9 ms). PyTorch's OpenMP threads spin
// between parallel regions instead (libgomp's `GOMP_SPINCOUNT`). So while a step runs, every
// other worker of the pool runs a spinner: a job that takes the pool's pending work as soon as
// it appears (`rayon::yield_now`) and otherwise spins. A spinner ends when the training ends,
// or after `IDLE_LIMIT` without work (an evaluation, a checkpoint), which bounds what it costs
// in the two cases where it takes a core from something else:
// - a worker can pick its spinner up while waiting inside another job (one injected by a
//   thread outside the pool); that job resumes when the spinner ends: once the pool has had
//   no work for `IDLE_LIMIT` (as when the step waits for that job), or when training ends, so
//   nothing deadlocks, though the job may finish late;
// - an idle spinner holds a core that another thread of the process (a collective's) could
//   use; it yields the core every `YIELD_EVERY` idle rounds.
// DDP and FSDP re-arm the spinners at the start and the end of every synchronising step
// ([`keep_warm`]), whose collectives may wait longer than `IDLE_LIMIT`. A thread's role (step,
// spinner) is a guard restored on drop, since rayon can hand a waiting or spinning worker an
// injected step: a role is never left behind, and a spinner running a step is not counted as
// spinning. Spinning is
// `auto` only where the ranks' pools fit in the cores (threads × local ranks ≤ cores): with
// more threads than cores a spinner would take the core of a thread that has work.
// `PHALANX_POOL_SPIN` overrides it. Which thread runs which piece of an operation does not
// change a result (vendor/burn-flex/PHALANX.md, Determinism), so spinning changes only time.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

use phalanx_core::env;

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
    rayon::scope(|_| {
        let _warm = WarmPool::arm();
        f()
    })
}

/// How long a spinner stays without work before it ends (Note [Warm pool]).
const IDLE_LIMIT: Duration = Duration::from_millis(2);
/// Idle rounds between two looks at the clock, and between two yields of the core.
const YIELD_EVERY: u32 = 64;

/// Steps on the compute pool now running with the pool spinning, and workers now in a
/// spinner.
static ARMED: AtomicUsize = AtomicUsize::new(0);
static SPINNING: AtomicUsize = AtomicUsize::new(0);
/// Bumped by every re-arm: a spinner that sees it change counts its idle time from then.
static EPOCH: AtomicUsize = AtomicUsize::new(0);

/// What a worker of the pool is doing, as far as spinning goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Other,
    /// Runs an armed step.
    Step,
    /// Runs a spinner.
    Spinner,
}

thread_local! {
    static ROLE: Cell<Role> = const { Cell::new(Role::Other) };
}

/// `PHALANX_POOL_SPIN`'s setting: `Some(true)` always (with two threads or more), `Some(false)`
/// never, `None` for `auto`. A value that is none of these is named on stderr and `auto` kept.
fn spin_setting() -> Option<bool> {
    match env::get(env::PHALANX_POOL_SPIN).as_deref().map(str::trim) {
        None | Some("auto") => None,
        Some("1") => Some(true),
        Some("0") => Some(false),
        Some(other) => {
            eprintln!(
                "phalanx: PHALANX_POOL_SPIN={other:?} is not auto, 0 or 1; keeping auto \
                 (spin while the ranks' compute threads fit in the cores)"
            );
            None
        }
    }
}

/// Whether a pool of `threads` spins under `setting` with `local_ranks` ranks on a host of
/// `cores` (Note [Warm pool]).
fn spins(setting: Option<bool>, threads: usize, local_ranks: usize, cores: usize) -> bool {
    threads > 1 && setting.unwrap_or(fits_in_cores(threads, local_ranks, cores))
}

/// Whether `threads` for each of `local_ranks` ranks fit in the host's `cores`: the rule by
/// which a pool spins (Note [Warm pool]) and a rank that waits alone may spin
/// ([`ranks_have_cores`]).
fn fits_in_cores(threads: usize, local_ranks: usize, cores: usize) -> bool {
    threads * local_ranks.max(1) <= cores
}

/// This thread's role for as long as it lives; the role before it comes back on drop, a panic
/// included. `SPINNING` counts the threads whose current role is [`Role::Spinner`], so a
/// spinner that runs a step (rayon can hand a worker that waits, or spins, an injected job) is
/// not counted while it does.
struct RoleGuard {
    prev: Role,
}

impl RoleGuard {
    fn take(role: Role) -> RoleGuard {
        RoleGuard {
            prev: set_role(role),
        }
    }
}

impl Drop for RoleGuard {
    fn drop(&mut self) {
        set_role(self.prev);
    }
}

/// Sets this thread's role, keeping `SPINNING` in step; returns the role before.
fn set_role(role: Role) -> Role {
    let prev = ROLE.with(|r| r.replace(role));
    if prev == Role::Spinner {
        SPINNING.fetch_sub(1, Ordering::Relaxed);
    }
    if role == Role::Spinner {
        SPINNING.fetch_add(1, Ordering::Relaxed);
    }
    prev
}

/// The ranks on this host (any launcher's variables: torchrun's, mpirun's, srun's) and its
/// cores: what both a rank's share of the cores and the spin decision are made of.
fn host() -> (usize, usize) {
    let local_ranks = phalanx_pg::DistEnv::from_env().map_or(1, |e| e.local_world_size);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (local_ranks.max(1), cores)
}

/// This rank's share of the host's cores (at least one): the compute pool's size when the user
/// did not choose one with `RAYON_NUM_THREADS`, so that several ranks per host do not
/// oversubscribe the cores.
pub fn threads_per_rank() -> usize {
    let (local_ranks, cores) = host();
    (cores / local_ranks).max(1)
}

/// Whether the compute threads of every rank of this host fit in its cores, so that each rank
/// has cores of its own: a rank that waits with nothing else to do may then spin on them
/// rather than sleep (a pipeline stage does). Without a launcher's variables this process
/// counts as the host's one rank.
pub fn ranks_have_cores() -> bool {
    let (local_ranks, cores) = host();
    fits_in_cores(
        on_compute_pool(rayon::current_num_threads),
        local_ranks,
        cores,
    )
}

/// Whether a pool of `threads` spins on this host, under `PHALANX_POOL_SPIN` and the
/// launcher's `LOCAL_WORLD_SIZE`.
fn spins_here(threads: usize) -> bool {
    let (local_ranks, cores) = host();
    spins(spin_setting(), threads, local_ranks, cores)
}

/// The armed state of one [`on_compute_pool`] call: disarms on drop, a panic included.
struct WarmPool {
    _role: RoleGuard,
}

impl WarmPool {
    /// Arms the spinners when the pool spins (called on the step's worker).
    fn arm() -> Option<WarmPool> {
        if !spins_here(rayon::current_num_threads()) {
            return None;
        }
        let warm = WarmPool {
            _role: RoleGuard::take(Role::Step),
        };
        ARMED.fetch_add(1, Ordering::AcqRel);
        rearm();
        Some(warm)
    }
}

impl Drop for WarmPool {
    fn drop(&mut self) {
        ARMED.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Keeps the pool warm over a synchronising step (Note [Warm pool]): starts spinners again
/// now and when the returned guard drops, since the step's collectives may wait longer than a
/// spinner's `IDLE_LIMIT`. Nothing when not called from an armed step.
pub(crate) fn keep_warm() -> KeepWarm {
    rearm();
    KeepWarm
}

/// Re-arms the spinners when dropped ([`keep_warm`]).
pub(crate) struct KeepWarm;

impl Drop for KeepWarm {
    fn drop(&mut self) {
        rearm();
    }
}

/// Starts spinners on the pool's idle workers again when called from an armed step and some
/// have ended, and renews the idle time of those still running.
fn rearm() {
    if ROLE.with(Cell::get) != Role::Step {
        return;
    }
    EPOCH.fetch_add(1, Ordering::Relaxed);
    let armed = ARMED.load(Ordering::Acquire);
    if SPINNING.load(Ordering::Relaxed) + armed >= rayon::current_num_threads() {
        return;
    }
    // One job per worker, each run by its own worker only; the copies that reach a step's
    // worker or a worker already spinning return at once.
    rayon::spawn_broadcast(|_| spin());
}

/// A spinner on this worker (Note [Warm pool]): runs the pool's work as it appears until no
/// step is armed or none came for `IDLE_LIMIT` since the last work or re-arm.
fn spin() {
    // A step's worker runs its step; a worker already spinning runs one spinner.
    if ROLE.with(Cell::get) != Role::Other {
        return;
    }
    let _role = RoleGuard::take(Role::Spinner);
    let mut worked = Instant::now();
    let mut epoch = EPOCH.load(Ordering::Relaxed);
    let mut idle_rounds = 0u32;
    while ARMED.load(Ordering::Acquire) > 0 {
        if rayon::yield_now() == Some(rayon::Yield::Executed) {
            idle_rounds = 0;
            worked = Instant::now();
            continue;
        }
        idle_rounds += 1;
        if !idle_rounds.is_multiple_of(YIELD_EVERY) {
            std::hint::spin_loop();
            continue;
        }
        let now_epoch = EPOCH.load(Ordering::Relaxed);
        if now_epoch != epoch {
            (epoch, worked) = (now_epoch, Instant::now());
        } else if worked.elapsed() > IDLE_LIMIT {
            break;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::sync::atomic::Ordering;
    use std::sync::{mpsc, Mutex};
    use std::time::{Duration, Instant};

    use rayon::prelude::*;

    use super::{
        on_compute_pool, rearm, spins, spins_here, Role, RoleGuard, ARMED, IDLE_LIMIT, ROLE,
        SPINNING,
    };

    /// The tests share rayon's global pool and the spinner counts.
    static POOL: Mutex<()> = Mutex::new(());

    /// Waits up to 10 s for `ok`; whether it came.
    fn within_deadline(ok: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ok() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    }

    #[test]
    fn runs_on_a_worker_nests_and_resumes_a_panic_in_the_caller() {
        let _pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
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
        assert_eq!(
            ARMED.load(Ordering::Acquire),
            0,
            "a panicking step stayed armed"
        );
    }

    /// A role taken over another comes back on drop, and only current spinners are counted.
    #[test]
    fn roles_nest_and_only_current_spinners_count() {
        let _pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        assert!(
            within_deadline(
                || ARMED.load(Ordering::Acquire) == 0 && SPINNING.load(Ordering::Relaxed) == 0
            ),
            "spinners of an earlier step went on"
        );
        std::thread::spawn(|| {
            let role = || ROLE.with(Cell::get);
            {
                let _spinner = RoleGuard::take(Role::Spinner);
                assert_eq!(SPINNING.load(Ordering::Relaxed), 1);
                {
                    // A step handed to a spinning worker.
                    let _step = RoleGuard::take(Role::Step);
                    assert_eq!(
                        SPINNING.load(Ordering::Relaxed),
                        0,
                        "a step counted as spinning"
                    );
                    assert!(role() == Role::Step);
                }
                assert_eq!(SPINNING.load(Ordering::Relaxed), 1);
                assert!(role() == Role::Spinner, "the spinner's role was lost");
            }
            assert_eq!(SPINNING.load(Ordering::Relaxed), 0);
            assert!(role() == Role::Other);
        })
        .join()
        .expect("the roles did not nest");
    }

    #[test]
    fn spins_when_the_ranks_threads_fit_in_the_cores_or_when_told() {
        assert!(spins(None, 2, 1, 2));
        assert!(spins(None, 4, 2, 8));
        assert!(!spins(None, 2, 2, 2), "4 threads on 2 cores spin");
        assert!(!spins(None, 1, 1, 2), "a pool of one has nobody to spin");
        assert!(spins(Some(true), 2, 2, 2));
        assert!(!spins(Some(true), 1, 1, 2));
        assert!(!spins(Some(false), 2, 1, 8));
    }

    /// The other workers spin while a step runs, take its work, stop when idle and when the
    /// step ends; a job injected from outside the pool during the step completes (a spinner
    /// nested under it ends once the step stops handing out work).
    #[test]
    fn other_workers_spin_during_a_step_and_stop_after_it() {
        let _pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        let threads = on_compute_pool(rayon::current_num_threads);
        if !spins_here(threads) {
            eprintln!(
                "a pool of {threads} does not spin here (cores, LOCAL_WORLD_SIZE, \
                 PHALANX_POOL_SPIN); nothing to check"
            );
            return;
        }
        let (sum, outside) = on_compute_pool(|| {
            // Re-armed while polling: a poll that oversleeps `IDLE_LIMIT` on a loaded machine
            // would otherwise see the spinners end for want of work.
            assert!(
                within_deadline(|| {
                    rearm();
                    SPINNING.load(Ordering::Relaxed) == threads - 1
                }),
                "the other workers did not start spinning"
            );
            let sum: u64 = (0..1_000_000u64).into_par_iter().sum();
            // A job from a thread outside the pool that splits and waits inside the pool.
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let (a, b) = rayon::join(
                    || (0..500u64).into_par_iter().sum::<u64>(),
                    || (500..1000u64).into_par_iter().sum::<u64>(),
                );
                tx.send(a + b).unwrap();
            });
            let outside = rx.recv_timeout(Duration::from_secs(10));
            std::thread::sleep(IDLE_LIMIT * 5);
            assert!(
                within_deadline(|| SPINNING.load(Ordering::Relaxed) == 0),
                "the spinners went on without work"
            );
            assert!(
                within_deadline(|| {
                    rearm();
                    SPINNING.load(Ordering::Relaxed) == threads - 1
                }),
                "a re-arm did not start the spinners again"
            );
            (sum, outside)
        });
        assert_eq!(sum, 499_999_500_000);
        assert_eq!(
            outside,
            Ok(499_500),
            "a job from outside the pool did not complete"
        );
        assert!(
            within_deadline(|| SPINNING.load(Ordering::Relaxed) == 0),
            "the spinners outlived the step"
        );
    }
}
