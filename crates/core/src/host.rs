//! This machine's host name, as the rendezvous, `phalanx doctor` and the flight recorder show
//! it.
//!
//! ```
//! if let Some(name) = phalanx_core::host::hostname() {
//!     assert!(!name.is_empty() && !name.contains('\0'));
//! }
//! ```

/// The kernel's host name (`gethostname`), `None` when it fails or is empty; each caller
/// chooses its own stand-in (an address, `?`).
pub fn hostname() -> Option<String> {
    // HOST_NAME_MAX is 64 on Linux and 255 under POSIX.
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for writes of its length, which is passed; gethostname
    // writes at most that many bytes.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    (ok && end > 0).then(|| String::from_utf8_lossy(&buf[..end]).into_owned())
}
