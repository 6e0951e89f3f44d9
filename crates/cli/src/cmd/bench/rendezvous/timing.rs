//! The rank threads' start line and the clock the bench reads.

use std::{
    sync::atomic::{AtomicU32, AtomicUsize, Ordering},
    time::Duration,
};

/// Where the rank threads wait to start: one futex word that the bench opens with one wake-up
/// of them all. A `std::sync::Barrier` woke them onto its mutex, which they then took one at a
/// time, a context switch each: 0.5 s before the last of 16,384 ranks had started.
#[derive(Default)]
pub(super) struct Gate {
    open: AtomicU32,
    waiting: AtomicUsize,
}

impl Gate {
    pub(super) fn wait(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        while self.open.load(Ordering::Acquire) == 0 {
            // SAFETY: FUTEX_WAIT on a live, aligned u32 that stays put (the gate is in an Arc
            // every waiter holds); it returns at once if the word is no longer 0.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.open.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    0u32,
                    std::ptr::null::<libc::timespec>(),
                )
            };
        }
    }

    /// Returns once `n` threads have come to the gate.
    pub(super) fn all_there(&self, n: usize) {
        while self.waiting.load(Ordering::SeqCst) < n {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub(super) fn open(&self) {
        self.open.store(1, Ordering::Release);
        // SAFETY: FUTEX_WAKE on the same word; wakes every thread asleep on it.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.open.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                i32::MAX,
            )
        };
    }
}

/// Nanoseconds on `CLOCK_MONOTONIC`, which every process on the machine shares.
pub(super) fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

pub(super) fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}
