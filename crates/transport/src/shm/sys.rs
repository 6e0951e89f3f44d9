//! The few system calls of the shared-memory path: futex wait/wake on a shared word, and
//! whether a peer process still lives.

use std::{sync::atomic::AtomicU32, time::Duration};

/// Sleeps while `*word == expected`, at most `timeout`; returns early on a wake, a signal or
/// a changed value. Spurious returns are fine: callers re-check their condition.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, 4-aligned u32 (in a shared mapping, hence no FUTEX_PRIVATE
    // flag: waiter and waker may be different processes); the kernel only reads it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every process sleeping on `word`.
pub(crate) fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: as in `futex_wait`; FUTEX_WAKE does not touch the word's value.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// An id of this process's pid namespace (0 when unknown): pids are comparable only
/// between processes of the same namespace.
pub(crate) fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid")
        .map(|m| m.ino() ^ m.dev().rotate_left(32))
        .unwrap_or(0)
}

/// Whether process `pid` is gone: absent, or a zombie nobody has reaped yet.
pub(crate) fn process_exited(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    // SAFETY: signal 0 performs only the existence and permission check.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 {
        // EPERM means it exists under another user; only ESRCH means gone.
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    // A dead child of a parent that has not waited for it still answers kill(0).
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state == 'Z' || state == 'X'),
        Err(_) => false,
    }
}

/// Copies `dst.len()` bytes from `addr` in process `pid` into `dst` (Note [Single copy] in
/// `group.rs`): one copy, by the kernel, with no shared buffer in between.
pub(crate) fn read_process(pid: u32, addr: u64, dst: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0usize;
    while done < dst.len() {
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: dst.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize + done) as *mut libc::c_void,
            iov_len: dst.len() - done,
        };
        // SAFETY: `local` covers the rest of `dst`, which we borrow mutably; the kernel checks
        // `remote` against the other process's mappings and fails instead of faulting.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn liveness() {
        assert!(!process_exited(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !process_exited(pid) {
            assert!(Instant::now() < deadline, "zombie not recognised as exited");
            std::thread::sleep(Duration::from_millis(5));
        }
        child.wait().unwrap();
        assert!(process_exited(pid));
    }

    #[test]
    fn futex_wait_times_out_and_returns_on_changed_value() {
        let w = AtomicU32::new(7);
        let t = Instant::now();
        futex_wait(&w, 7, Duration::from_millis(30));
        assert!(t.elapsed() >= Duration::from_millis(25));
        let t = Instant::now();
        futex_wait(&w, 8, Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}
