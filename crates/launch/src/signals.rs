//! Signals: the agent catches the signals of `--signals-to-handle` (torchrun's flag; SIGTERM,
//! SIGINT, SIGHUP and SIGQUIT by default, SIGUSR1 for Slurm's warning before a time limit) and
//! forwards them to its workers from the monitor loop before stopping them, and names the
//! signals that ended a worker.

use std::sync::atomic::{AtomicI32, Ordering};

/// The last signal the agent received and has not yet handled; 0 when none.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    RECEIVED.store(sig, Ordering::SeqCst);
}

/// The signals the agent catches and forwards to its workers (`--signals-to-handle`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalSet(Vec<libc::c_int>);

impl Default for SignalSet {
    /// torchrun's default: SIGTERM, SIGINT, SIGHUP, SIGQUIT.
    fn default() -> Self {
        SignalSet(vec![
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
        ])
    }
}

impl SignalSet {
    /// The signal numbers.
    pub fn signals(&self) -> &[libc::c_int] {
        &self.0
    }
}

/// Signals an agent may catch: the ones that end or warn a process. SIGKILL and SIGSTOP cannot
/// be caught, SIGCHLD and the faults (SIGSEGV, …) are the agent's own business.
const CATCHABLE: [libc::c_int; 8] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGXCPU,
];

/// `--signals-to-handle`: a comma list of names (`SIGUSR1`, `USR1`) or numbers.
pub(crate) fn parse_signals(text: &str) -> Result<SignalSet, String> {
    let accepted = || {
        CATCHABLE
            .iter()
            .map(|&s| signal_name(s))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let upper = item.to_ascii_uppercase();
        let name = match upper.starts_with("SIG") {
            true => upper.clone(),
            false => format!("SIG{upper}"),
        };
        let sig = CATCHABLE
            .iter()
            .copied()
            .find(|&s| signal_name(s) == name || item.parse::<libc::c_int>() == Ok(s))
            .ok_or_else(|| {
                format!(
                    "{item:?} is not a signal the agent can handle (accepted: {})",
                    accepted()
                )
            })?;
        if !out.contains(&sig) {
            out.push(sig);
        }
    }
    if out.is_empty() {
        return Err(format!("names no signal (accepted: {})", accepted()));
    }
    Ok(SignalSet(out))
}

/// Installs the agent's handlers for `set`, and always for SIGINT and SIGTERM: an agent that
/// died of those would leave its workers to be SIGKILLed with it, with no grace period (and
/// torchrun's Python agent also stops cleanly on Ctrl-C, through KeyboardInterrupt, whatever
/// `--signals-to-handle` says). Workers run in their own process groups, so a terminal's
/// Ctrl-C reaches only the agent, which decides what the workers get.
pub(crate) fn install(set: &SignalSet) {
    let always = [libc::SIGINT, libc::SIGTERM];
    let extra = always.iter().filter(|s| !set.signals().contains(s));
    for &sig in set.signals().iter().chain(extra) {
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

    #[test]
    fn signal_lists() {
        let s = parse_signals("SIGTERM, usr1,10,SIGINT").unwrap();
        assert_eq!(s.signals(), [libc::SIGTERM, libc::SIGUSR1, libc::SIGINT]);
        let e = parse_signals("SIGFOO").unwrap_err();
        assert!(e.contains("SIGFOO") && e.contains("SIGUSR1"), "{e}");
        assert!(parse_signals("SIGKILL").unwrap_err().contains("SIGKILL"));
        assert!(parse_signals(",").unwrap_err().contains("no signal"));
        assert_eq!(SignalSet::default().signals().len(), 4);
    }
}
