//! The flight recorder's clock: [`ticks`], the cheapest timestamp there is, and [`Clock`], which
//! turns them into wall-clock nanoseconds when a dump is written (Note [Flight recorder]).

use std::time::{SystemTime, UNIX_EPOCH};

/// A timestamp in the cheapest clock there is: the CPU's time-stamp counter on x86-64 (~12 ns
/// here, where reading the system clock costs ~57 ns in a VM), converted to nanoseconds only
/// when a dump is written ([`Clock`]); elsewhere the system clock's nanoseconds.
#[inline]
pub(super) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions; every x86-64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        wall_ns()
    }
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// How [`ticks`] map to the wall clock: one pair read when the recorder starts, one when a dump
/// is written, and the line through them (the counter is invariant on CPUs that run phalanx's
/// shared-memory collectives; a dump's times are as good as that).
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    pub(super) ticks: u64,
    pub(super) ns: u64,
}

impl Clock {
    pub(super) fn now() -> Clock {
        Clock {
            ticks: ticks(),
            ns: wall_ns(),
        }
    }

    /// Wall-clock nanoseconds of `t` ticks, on the line from `self` to `later`.
    pub(super) fn ns(&self, later: &Clock, t: u64) -> u64 {
        let dt = later.ticks.saturating_sub(self.ticks);
        let dns = later.ns.saturating_sub(self.ns);
        if dt == 0 || cfg!(not(target_arch = "x86_64")) {
            return t;
        }
        let per_tick = dns as f64 / dt as f64;
        (self.ns as f64 + (t as f64 - self.ticks as f64) * per_tick) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_map_onto_the_wall_clock_line() {
        let epoch = Clock {
            ticks: 100,
            ns: 1_000,
        };
        let later = Clock {
            ticks: 300,
            ns: 1_400,
        };
        if cfg!(target_arch = "x86_64") {
            assert_eq!(epoch.ns(&later, 200), 1_200);
            assert_eq!(epoch.ns(&later, 300), 1_400);
        } else {
            assert_eq!(epoch.ns(&later, 1_234), 1_234);
        }
        let (a, b) = (Clock::now(), Clock::now());
        assert!(b.ticks >= a.ticks && b.ns >= a.ns);
    }
}
