//! Room in the kernel's futex table for a store with thousands of connection threads.
//!
//! Note [A futex table for thousands of waiters]
//! Since Linux 6.16 a process's private futexes hash into a table of its own, sized from the
//! CPUs it may run on (16 buckets on 2 CPUs), not from its threads. Every waiter of the store
//! sleeps on a condvar of its own (`table.rs`), so at 16,384 connections ~1,000 sleepers share
//! each bucket and every wake-up walks them under the bucket's lock: `futex_wake` took a fifth
//! of the CPU time and 16,384 ranks took 6.5 s to rendezvous in the dev build, against 3.9 s
//! with the table grown. The store grows it (`PR_FUTEX_HASH_SET_SLOTS`) as its connections
//! cross powers of two from 1,024: two buckets per connection, never shrinking. On other
//! kernels the call fails with EINVAL and nothing changes (they hash into the global table,
//! sized from the machine).

/// `prctl` options from `linux/prctl.h` (6.16), not yet in the `libc` crate.
#[cfg(target_os = "linux")]
const PR_FUTEX_HASH: libc::c_int = 78;
#[cfg(target_os = "linux")]
const PR_FUTEX_HASH_SET_SLOTS: libc::c_ulong = 1;
#[cfg(target_os = "linux")]
const PR_FUTEX_HASH_GET_SLOTS: libc::c_ulong = 2;
/// Fewer connections than this never need it.
const FROM: usize = 1024;
/// The kernel's bound on a private table is far above this; memory is 64 bytes a bucket.
#[cfg(target_os = "linux")]
const MOST: usize = 1 << 17;

/// Grows this process's futex table for `connections` when the count has just reached a
/// power of two at or past [`FROM`].
pub(super) fn make_room(connections: usize) {
    if connections < FROM || !connections.is_power_of_two() {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let want = (2 * connections).min(MOST);
        // SAFETY: prctl with integer arguments only; failure leaves the process unchanged.
        let now = unsafe { libc::prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, 0u64, 0u64, 0u64) };
        // 0: the global table (a process that asked for it); negative: an older kernel.
        if now > 0 && (now as usize) < want {
            let r = unsafe {
                libc::prctl(
                    PR_FUTEX_HASH,
                    PR_FUTEX_HASH_SET_SLOTS,
                    want as libc::c_ulong,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                )
            };
            tracing::debug!(
                connections,
                slots = want,
                ok = r == 0,
                "store: futex table grown"
            );
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn slots() -> libc::c_int {
        // SAFETY: prctl with integer arguments only.
        unsafe { libc::prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, 0u64, 0u64, 0u64) }
    }

    #[test]
    fn the_table_grows_at_powers_of_two_on_kernels_that_have_one() {
        // Threads, so that the kernel has made this process its table.
        let t: Vec<_> = (0..4).map(|_| std::thread::spawn(|| ())).collect();
        t.into_iter().for_each(|t| t.join().unwrap());
        let before = slots();
        // Not a power of two: nothing (the kernel may grow it for new threads of other tests).
        make_room(3000);
        assert!(slots() >= before);
        make_room(4096);
        if before > 0 {
            assert!(slots() >= 8192, "{} slots", slots());
        } else {
            // Before 6.16 (no private table: an error) or a process on the global table (0).
            assert!(slots() <= 0);
        }
    }
}
