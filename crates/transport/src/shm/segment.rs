//! [`ShmSegment`]: one file under `/dev/shm`, mapped shared into this process.

use std::{
    fs::{File, OpenOptions},
    io,
    os::{fd::AsRawFd, unix::fs::OpenOptionsExt},
    path::{Path, PathBuf},
    ptr::NonNull,
};

use crate::{Error, Result};

/// Where segments live: a tmpfs every process of the host can map.
const SHM_DIR: &str = "/dev/shm";

/// A shared-memory segment: a file under `/dev/shm` mapped read-write and shared.
///
/// The creator unlinks the file when it drops its segment; mappings that peers hold stay
/// valid until they drop theirs (the memory lives as long as one mapping does).
#[derive(Debug)]
pub struct ShmSegment {
    ptr: NonNull<u8>,
    len: usize,
    path: PathBuf,
    owner: bool,
}

// SAFETY: the segment is plain memory owned by this value; concurrent access to its bytes
// goes through atomics or follows the protocol of Note [Shared-memory protocol] (mod.rs).
unsafe impl Send for ShmSegment {}
// SAFETY: as above; `&ShmSegment` hands out only a raw pointer and the length.
unsafe impl Sync for ShmSegment {}

fn shm_err(path: &Path, op: impl Into<String>, source: io::Error) -> Error {
    Error::Shm {
        path: path.display().to_string(),
        op: op.into(),
        source,
    }
}

fn path_of(name: &str) -> Result<PathBuf> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && !name.starts_with('.');
    if !ok {
        return Err(shm_err(
            Path::new(name),
            "check the name",
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "segment names are 1-200 characters of [A-Za-z0-9._-], not starting with '.'",
            ),
        ));
    }
    Ok(Path::new(SHM_DIR).join(name))
}

impl ShmSegment {
    /// Creates the segment `/dev/shm/<name>` of `bytes` zeroed bytes (mode 0600), failing if
    /// it exists. The name should include the job id and the rank so that jobs never collide.
    ///
    /// The file is built under a temporary name and linked into place when complete, so that
    /// [`ShmSegment::open`] never sees a half-sized file.
    pub fn create(name: &str, bytes: usize) -> Result<ShmSegment> {
        let path = path_of(name)?;
        if bytes == 0 {
            return Err(shm_err(
                &path,
                "create",
                io::Error::new(io::ErrorKind::InvalidInput, "zero-sized segment"),
            ));
        }
        let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| shm_err(&tmp, "create", e))?;
        let built = file
            .set_len(bytes as u64)
            .map_err(|e| shm_err(&tmp, format!("resize to {bytes} bytes"), e))
            .and_then(|()| map(&file, bytes, &tmp, true))
            .and_then(|ptr| {
                std::fs::hard_link(&tmp, &path)
                    .map(|()| ptr)
                    .map_err(|e| {
                        let hint = if e.kind() == io::ErrorKind::AlreadyExists {
                            " (a segment of another process or an earlier job with the same \
                             id; remove it if that job is gone)"
                        } else {
                            ""
                        };
                        shm_err(&path, format!("create{hint}"), e)
                    })
                    .inspect_err(|_| unmap(ptr, bytes))
            });
        let _ = std::fs::remove_file(&tmp);
        Ok(ShmSegment {
            ptr: built?,
            len: bytes,
            path,
            owner: true,
        })
    }

    /// Maps an existing segment created by another rank with [`ShmSegment::create`]; fails
    /// with `NotFound` inside [`Error::Shm`] while it does not exist yet (callers retry).
    pub fn open(name: &str, bytes: usize) -> Result<ShmSegment> {
        let path = path_of(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| shm_err(&path, "open", e))?;
        let len = file
            .metadata()
            .map_err(|e| shm_err(&path, "stat", e))?
            .len();
        if len < bytes as u64 {
            // Mapping past the end of the file would fault (SIGBUS) on first access.
            return Err(shm_err(
                &path,
                "open",
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("segment holds {len} bytes, expected {bytes}"),
                ),
            ));
        }
        let ptr = map(&file, bytes, &path, false)?;
        Ok(ShmSegment {
            ptr,
            len: bytes,
            path,
            owner: false,
        })
    }

    /// Start of the mapping (page-aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: segments have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file behind the segment.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this process created the segment (and unlinks it on drop).
    pub fn is_owner(&self) -> bool {
        self.owner
    }
}

fn map(file: &File, bytes: usize, path: &Path, populate: bool) -> Result<NonNull<u8>> {
    // The creator pre-faults its own pages so that the first collective does not pay for
    // page faults inside its timing.
    let flags = libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 };
    // SAFETY: mapping a file we hold open, at least `bytes` long (checked by the callers),
    // at an address of the kernel's choosing; the result is checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(shm_err(path, "mmap", io::Error::last_os_error()));
    }
    Ok(NonNull::new(p.cast()).expect("mmap returned null without MAP_FIXED"))
}

fn unmap(ptr: NonNull<u8>, len: usize) {
    // SAFETY: `ptr..ptr+len` is a mapping made by `map` that nothing uses any more.
    unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
}

impl ShmSegment {
    /// Removes the segment's name from `/dev/shm` once every peer has mapped it: the mappings
    /// stay valid, and the memory goes back to the system when the last process unmaps it,
    /// however it ends (a SIGKILLed process runs no destructor, and neither does a Python
    /// interpreter that exits with the group still referenced).
    pub fn unlink(&mut self) {
        if self.owner {
            let _ = std::fs::remove_file(&self.path);
            self.owner = false;
        }
    }
}

impl Drop for ShmSegment {
    fn drop(&mut self) {
        unmap(self.ptr, self.len);
        if self.owner {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(tag: &str) -> String {
        format!("phalanx-test-seg-{tag}-{}", std::process::id())
    }

    #[test]
    fn create_open_share_and_unlink() {
        let n = name("share");
        let a = ShmSegment::create(&n, 8192).unwrap();
        assert!(ShmSegment::create(&n, 8192).is_err(), "O_EXCL semantics");
        let b = ShmSegment::open(&n, 8192).unwrap();
        // SAFETY: both mappings are live and 8192 bytes long; single-threaded test.
        unsafe {
            *a.as_ptr().add(100) = 42;
            assert_eq!(*b.as_ptr().add(100), 42);
        }
        let path = a.path().to_owned();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        drop(a);
        assert!(!path.exists(), "the creator unlinks on drop");
        // SAFETY: `b` is still mapped; the memory outlives the unlinked name.
        unsafe { assert_eq!(*b.as_ptr().add(100), 42) };
    }

    #[test]
    fn open_refuses_missing_short_and_bad_names() {
        let missing = ShmSegment::open(&name("missing"), 64).unwrap_err();
        assert!(
            matches!(&missing, Error::Shm { source, .. } if source.kind() == io::ErrorKind::NotFound)
        );
        let n = name("short");
        let _a = ShmSegment::create(&n, 4096).unwrap();
        let e = ShmSegment::open(&n, 8192).unwrap_err().to_string();
        assert!(e.contains("4096") && e.contains("8192"), "{e}");
        assert!(ShmSegment::create("../etc/passwd", 64).is_err());
        assert!(ShmSegment::create("", 64).is_err());
    }
}
