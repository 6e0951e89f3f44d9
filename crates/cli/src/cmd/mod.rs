//! One module per subcommand.
pub(crate) mod bench;
pub(crate) mod checkpoint;
pub(crate) mod doctor;
pub(crate) mod env;
pub(crate) mod fr_trace;
pub(crate) mod launch;
pub(crate) mod sampler;
pub(crate) mod sizes;
pub(crate) mod store;
pub(crate) mod train;

/// Burn's CPU backend sizes its thread pool to every core; with several ranks per host that
/// oversubscribes the cores. Give each rank its share unless the user chose. Also keeps freed
/// tensor memory in the process ([`keep_freed_memory`]).
pub(crate) fn limit_compute_threads() {
    keep_freed_memory();
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return;
    }
    // Set before Burn creates its pool (first tensor operation), while only this thread runs.
    std::env::set_var(
        "RAYON_NUM_THREADS",
        phalanx_train::threads_per_rank().to_string(),
    );
}

/// Every training step frees and reallocates the same multi-megabyte tensors. glibc serves
/// blocks of 128 KiB and up with fresh `mmap`s (and trims the heap top) by default, so each step
/// paid page faults and kernel page zeroing for every activation and gradient (~10% of a
/// 784-2048-2048-10 step in `perf`). Serving blocks up to 32 MiB from the heap and never trimming
/// it is what PyTorch's caching allocator achieves: steady-state steps allocate nothing from the
/// kernel. Resident memory stays at the peak step's, which it reaches anyway.
pub(crate) fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator thresholds; called before other threads allocate.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}
