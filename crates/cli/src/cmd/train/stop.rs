//! `phalanx train`'s answer to SIGUSR1 and SIGTERM (Slurm's warning before a time limit with
//! `--signal=B:USR1@120`, a preemption, `scancel`): with `--checkpoint-dir`, every rank finishes
//! its step, the ranks agree on the step to stop after (Note [Stop agreement] in
//! `phalanx_train::stop`), that step's checkpoint is committed, and each rank exits with
//! 128 + the signal (138 for SIGUSR1), the code Slurm's `RequeueExit` names
//! (docs/clusters.md). Without a directory nothing can be saved: SIGTERM keeps its default
//! action, and SIGUSR1 says so and then takes its default action (the process ends by it).

/// The signals that stop a run at a step boundary.
const STOP_SIGNALS: [libc::c_int; 2] = [libc::SIGUSR1, libc::SIGTERM];

extern "C" fn on_stop(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    phalanx_train::stop::request(sig);
}

extern "C" fn on_usr1_without_dir(sig: libc::c_int) {
    const MSG: &[u8] = b"phalanx train: received SIGUSR1 without --checkpoint-dir: nothing to \
                         save; ending as without a handler\n";
    // SAFETY: write(2), signal(2) and raise(3) are async-signal-safe; MSG is a static buffer.
    unsafe {
        libc::write(2, MSG.as_ptr().cast(), MSG.len());
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Installs the handlers of a training rank; `checkpointing`: the run has `--checkpoint-dir`.
pub(crate) fn install(checkpointing: bool) {
    let set = |sig: libc::c_int, handler: extern "C" fn(libc::c_int)| {
        // SAFETY: a zeroed sigaction whose handler only stores an atomic (or writes and
        // re-raises) is valid; sigemptyset initialises the mask. SA_RESTART: a blocking call
        // interrupted by the signal resumes (the transports retry EINTR where it still shows).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as *const () as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    };
    if checkpointing {
        phalanx_train::stop::arm();
        for sig in STOP_SIGNALS {
            set(sig, on_stop);
        }
    } else {
        set(libc::SIGUSR1, on_usr1_without_dir);
    }
}

/// The exit status of a rank stopped by `signal`: the shell's 128 + signal, which the launcher
/// also exits with after forwarding that signal, so the job ends with one code either way.
pub(crate) fn exit_code(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(1)
}
