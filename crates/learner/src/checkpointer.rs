//! [`CrashSafeCheckpointer`]: burn-train's file checkpointer, committed atomically.
//!
//! Note [Atomic checkpoint files]: burn-train's `FileCheckpointer` writes `name-epoch.bpk` in
//! place, so a crash (or a node lost) while rank 0 saves leaves a torn newest file under the
//! name a resume opens. This one writes the same bytes (burnpack, the same file names, so
//! either checkpointer restores the other's files) through `phalanx_core::file::write_atomic`
//! (Note [Crash-safe write]): a temporary file beside it, fsynced, renamed over the final name,
//! and the directory fsynced: at any moment the final name holds either nothing or a whole
//! checkpoint. (phalanx's own checkpoints and flight-recorder dumps go through the same
//! writer.)

use std::fs;
use std::path::{Path, PathBuf};

use burn_train::checkpoint::{Checkpoint, Checkpointer, CheckpointerError};

/// A drop-in for burn-train's `FileCheckpointer` whose files are committed atomically (Note
/// [Atomic checkpoint files]). Give three of them (model, optimizer, scheduler) to
/// `SupervisedTraining::with_custom_checkpointers`.
///
/// ```no_run
/// use phalanx_learner::CrashSafeCheckpointer;
/// let dir = std::path::Path::new("artifacts").join("checkpoint");
/// let (model, optim, scheduler) = (
///     CrashSafeCheckpointer::new(&dir, "model"),
///     CrashSafeCheckpointer::new(&dir, "optim"),
///     CrashSafeCheckpointer::new(&dir, "scheduler"),
/// );
/// // training.with_custom_checkpointers(model, optim, scheduler)
/// # let _ = (model, optim, scheduler);
/// ```
#[derive(Debug, Clone)]
pub struct CrashSafeCheckpointer {
    directory: PathBuf,
    name: String,
}

impl CrashSafeCheckpointer {
    /// Checkpoints named `name-<epoch>.bpk` in `directory` (created when the first is saved).
    pub fn new(directory: impl AsRef<Path>, name: &str) -> CrashSafeCheckpointer {
        CrashSafeCheckpointer {
            directory: directory.as_ref().to_path_buf(),
            name: name.to_string(),
        }
    }

    /// The file of `epoch`'s checkpoint: burn-train's `FileCheckpointer` names it the same.
    pub fn path(&self, epoch: usize) -> PathBuf {
        self.directory.join(format!("{}-{epoch}.bpk", self.name))
    }

    fn commit(&self, epoch: usize, bytes: &[u8]) -> std::io::Result<()> {
        fs::create_dir_all(&self.directory)?;
        phalanx_core::file::write_atomic(&self.path(epoch), bytes)
    }
}

impl<R: Checkpoint> Checkpointer<R> for CrashSafeCheckpointer {
    fn save(&self, epoch: usize, record: R) -> Result<(), CheckpointerError> {
        let bytes = record
            .checkpoint_into_bytes()
            .map_err(CheckpointerError::Record)?;
        self.commit(epoch, &bytes)
            .map_err(CheckpointerError::IOError)
    }

    fn delete(&self, epoch: usize) -> Result<(), CheckpointerError> {
        match fs::remove_file(self.path(epoch)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(CheckpointerError::IOError(e))
            }
            _ => Ok(()),
        }
    }

    fn restore(&self, epoch: usize) -> Result<R, CheckpointerError> {
        R::load(self.path(epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn_train::checkpoint::FileCheckpointer;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("phalanx-learner-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn record(values: Vec<f32>) -> burn::store::ModuleRecord {
        use burn::module::Param;
        use burn::tensor::{Device, Tensor, TensorData};
        #[derive(burn::module::Module, Debug)]
        struct One {
            w: Param<Tensor<1>>,
        }
        let n = values.len();
        let t = Tensor::from_data(TensorData::new(values, [n]), &Device::flex());
        burn::module::Module::into_record(One {
            w: Param::from_tensor(t),
        })
    }

    #[test]
    fn saved_files_restore_with_burns_checkpointer_and_leave_no_temporary() {
        let d = dir("ckpt");
        let ours = CrashSafeCheckpointer::new(&d, "model");
        Checkpointer::save(&ours, 3, record(vec![1.0, 2.0, 3.0])).unwrap();
        assert!(ours.path(3).exists());
        let names: Vec<String> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["model-3.bpk"]);
        let burns = FileCheckpointer::new(&d, "model");
        let _: burn::store::ModuleRecord = Checkpointer::restore(&burns, 3).unwrap();
        Checkpointer::<burn::store::ModuleRecord>::delete(&ours, 3).unwrap();
        Checkpointer::<burn::store::ModuleRecord>::delete(&ours, 3).unwrap();
        assert!(!ours.path(3).exists());
        fs::remove_dir_all(&d).unwrap();
    }
}
