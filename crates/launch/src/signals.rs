//! Signals: the agent catches SIGINT, SIGTERM, SIGHUP and SIGQUIT (torchrun's
//! `--signals-to-handle`) and forwards them to its workers from the monitor loop, and names
//! the signals that ended a worker.

use std::sync::atomic::{AtomicI32, Ordering};

/// The last signal the agent received and has not yet handled; 0 when none.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    RECEIVED.store(sig, Ordering::SeqCst);
}

/// Signals the agent forwards to its workers.
pub(crate) const HANDLED: [libc::c_int; 4] =
    [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Installs the agent's handlers. Workers run in their own process groups, so a terminal's
/// Ctrl-C reaches only the agent, which decides what the workers get.
pub(crate) fn install() {
    for sig in HANDLED {
        // SAFETY: a zeroed sigaction with a handler that only stores an atomic is valid;
        // sigemptyset initialises the mask.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// The signal received since the last call, if any.
pub(crate) fn take() -> Option<i32> {
    match RECEIVED.swap(0, Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Whether a signal is waiting to be handled (without handling it).
pub(crate) fn pending() -> bool {
    RECEIVED.load(Ordering::SeqCst) != 0
}

/// Sends `sig` to the process group `pgid` (a worker and whatever it started); a group that
/// is already gone is not an error.
pub(crate) fn kill_group(pgid: u32, sig: i32) {
    // SAFETY: kill(2) with a negative pid addresses a process group; no memory is involved.
    unsafe {
        libc::kill(-(pgid as libc::pid_t), sig);
    }
}

/// `SIGKILL`, `SIGSEGV`, … for the common signals; `SIG<n>` otherwise.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("SIG{sig}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(11), "SIGSEGV");
        assert_eq!(signal_name(64), "SIG64");
    }
}
