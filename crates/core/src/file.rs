//! Crash-safe file writes: a reader of the final name sees the previous contents or the new
//! ones, whole, never a part, whatever kills the writer (a signal, a lost node, a full disk).
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("phalanx-file-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("state.json");
//! phalanx_core::file::write_atomic(&path, b"{\"step\": 1}").unwrap();
//! phalanx_core::file::write_atomic(&path, b"{\"step\": 2}").unwrap();
//! assert_eq!(std::fs::read(&path).unwrap(), b"{\"step\": 2}");
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```
//!
//! Note [Crash-safe write]: the bytes go to a temporary file in the same directory (a rename
//! is atomic only within one file system), which is fsynced, renamed over the final name, and
//! then the directory is fsynced so that the rename itself is on disk before the caller counts
//! the file as saved (a checkpoint's commit record, a flight-recorder dump, a Learner epoch).
//! The temporary name is unique per writer (the process id and a per-process counter), so
//! two writers of one name (two threads, two processes sharing a directory) never write into
//! each other's temporary file; it is hidden (a leading dot) and ends in `.tmp`, so no
//! listing of checkpoints or dumps mistakes it for a finished file. On any error the
//! temporary file is removed; a writer killed before its rename leaves its temporary file
//! behind (nothing can run then), and the final name keeps the previous contents.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Replaces the file at `path` with `bytes` (Note [Crash-safe write]). The directory must
/// exist.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |file| file.write_all(bytes))
}

/// [`write_atomic`] with the contents written by `write` into the temporary file, for a
/// caller that streams them (a serialiser) instead of holding them in one buffer.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let tmp = temporary_path(path)?;
    let result = (|| {
        let mut file = File::create(&tmp)?;
        write(&mut file)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_directory(parent_of(path))
}

/// `.NAME.PID-N.tmp` beside `path`: unique per writer in this process and across processes.
fn temporary_path(path: &Path) -> io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        )
    })?;
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let tmp = format!(".{}.{}-{n}.tmp", name.to_string_lossy(), std::process::id());
    Ok(parent_of(path).join(tmp))
}

fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Makes a rename in `dir` durable. A file system that cannot fsync a directory (some network
/// and FUSE file systems answer EINVAL) has no more durability to give, so that is not an
/// error.
fn sync_directory(dir: &Path) -> io::Result<()> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "phalanx-file-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = scratch("replace");
        let path = dir.join("a.json");
        write_atomic(&path, b"old").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert!(leftovers(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_removes_its_temporary() {
        let dir = scratch("fail");
        let path = dir.join("a.json");
        write_atomic(&path, b"old").unwrap();
        let err = write_atomic_with(&path, |f| {
            f.write_all(b"half")?;
            Err(io::Error::other("disk full"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "disk full");
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn temporary_names_are_unique_hidden_and_beside_the_file() {
        let path = Path::new("/ckpt/step-1.json");
        let (a, b) = (temporary_path(path).unwrap(), temporary_path(path).unwrap());
        assert_ne!(a, b);
        assert_eq!(a.parent(), Some(Path::new("/ckpt")));
        let name = a.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with(".step-1.json.") && name.ends_with(".tmp"),
            "{name}"
        );
        let bare = temporary_path(Path::new("x")).unwrap();
        assert_eq!(bare.parent(), Some(Path::new(".")));
        assert!(temporary_path(Path::new("/")).is_err());
    }

    #[test]
    fn concurrent_writers_of_one_name_each_leave_a_whole_file() {
        let dir = scratch("concurrent");
        let path = dir.join("a.bin");
        let writers: Vec<_> = (0..8u8)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || write_atomic(&path, &vec![i; 1 << 16]).unwrap())
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let bytes = fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 1 << 16);
        assert!(bytes.iter().all(|&b| b == bytes[0]), "a torn file");
        assert!(leftovers(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }
}
