//! What the machine allows a bench of many ranks: the kernel's thread and map limits, and this
//! process's descriptors.

/// The kernel's limits that a bench of `ranks` threads runs into (the store serves their
/// connections from a few threads: Note [One event loop for every connection] in
/// phalanx-store): a sentence naming the setting to raise, or `None`. Past them a thread fails
/// to start, and Rust's runtime aborts the process when a thread cannot map its signal stack
/// ("failed to set up alternative stack guard page"), naming nothing.
pub(super) fn kernel_room(ranks: usize, limits: &KernelLimits) -> Option<String> {
    // The ranks' threads, with room for the rest.
    let threads = ranks + 256;
    // Per thread: its stack and guard page, its signal stack and guard page.
    let maps = 4 * ranks + 2_000;
    let short = |name: &str, now: usize, want: usize| {
        Some(format!(
            "--ranks {ranks} needs about {want} of {name}, which is {now} here: raise it \
             (`sysctl -w {name}={}`)",
            (want * 3 / 2).next_power_of_two()
        ))
    };
    if limits.pid_max < threads + limits.threads_now {
        return short(
            "kernel.pid_max",
            limits.pid_max,
            threads + limits.threads_now,
        );
    }
    if limits.threads_max < threads + limits.threads_now {
        return short(
            "kernel.threads-max",
            limits.threads_max,
            threads + limits.threads_now,
        );
    }
    if limits.max_map_count < maps {
        return short("vm.max_map_count", limits.max_map_count, maps);
    }
    None
}

/// What [`kernel_room`] weighs, as `/proc` gives it.
pub(super) struct KernelLimits {
    pid_max: usize,
    threads_max: usize,
    max_map_count: usize,
    /// Threads on the machine now (`/proc/loadavg`'s fourth field).
    threads_now: usize,
}

impl KernelLimits {
    /// This machine's; a value that cannot be read counts as no limit.
    pub(super) fn read() -> KernelLimits {
        let number = |path: &str| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(usize::MAX / 4)
        };
        let threads_now = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|t| t.split_whitespace().nth(3)?.split('/').nth(1)?.parse().ok())
            .unwrap_or(0);
        KernelLimits {
            pid_max: number("/proc/sys/kernel/pid_max"),
            threads_max: number("/proc/sys/kernel/threads-max"),
            max_map_count: number("/proc/sys/vm/max_map_count"),
            threads_now,
        }
    }
}

/// This process's soft limit on open descriptors.
pub(super) fn open_files_limit() -> usize {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return 1024;
    }
    usize::try_from(l.rlim_cur).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(pid_max: usize, max_map_count: usize) -> KernelLimits {
        KernelLimits {
            pid_max,
            threads_max: 192_739,
            max_map_count,
            threads_now: 300,
        }
    }

    #[test]
    fn the_kernel_setting_a_large_bench_needs_is_named() {
        // This machine's defaults: 16,384 ranks need 16,700 threads and 67,500 maps.
        let e = kernel_room(16_384, &limits(32_768, 65_530)).unwrap();
        assert!(
            e.contains("vm.max_map_count") && e.contains("65530") && e.contains("sysctl -w"),
            "{e}"
        );
        assert_eq!(kernel_room(16_384, &limits(32_768, 1 << 20)), None);
        // 32,768 ranks need more threads than the default allows.
        let e = kernel_room(32_768, &limits(32_768, 1 << 20)).unwrap();
        assert!(e.contains("kernel.pid_max") && e.contains("32768"), "{e}");
        assert_eq!(kernel_room(8_192, &limits(32_768, 65_530)), None);
    }
}
