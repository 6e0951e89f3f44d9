//! Finding the checkpoint a restarted job resumes from.
//!
//! Note [Newest complete checkpoint]: a job restarted by its launcher (`phalanx launch
//! --max-restarts`, torchrun's, Slurm's requeue) runs the same command line again; it must
//! find by itself which epoch to give `SupervisedTraining::checkpoint`. burn-train's
//! checkpointers (its `FileCheckpointer`, [`crate::CrashSafeCheckpointer`]) write one file per
//! record and epoch, `model-<epoch>.bpk`, `optim-<epoch>.bpk` and, for a scheduler with state,
//! `scheduler-<epoch>.bpk`, in that order, on a background thread, and delete old epochs. An
//! epoch is complete when its model and optimizer files are both there (and its scheduler file
//! if any epoch has one): a kill between two of its files leaves an epoch that would fail
//! to restore, and the one before it is taken. burn-train's default writer also writes each
//! file in place, so a kill in the middle of a write can leave a file torn under its final
//! name; [`crate::CrashSafeCheckpointer`] commits each file atomically, which rules that out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The newest epoch whose checkpoint in `checkpoint_dir` (burn-train's layout,
/// `<artifact dir>/checkpoint` for `with_default_checkpointers`) is complete, or `None` when
/// there is none (a first run: train from the start). Note [Newest complete checkpoint].
///
/// ```no_run
/// let dir = std::path::Path::new("artifacts");
/// match phalanx_learner::newest_checkpoint(&dir.join("checkpoint")) {
///     Some(epoch) => println!("resuming after epoch {epoch}"), // training.checkpoint(epoch)
///     None => println!("starting afresh"),
/// }
/// ```
pub fn newest_checkpoint(checkpoint_dir: &Path) -> Option<usize> {
    let entries = std::fs::read_dir(checkpoint_dir).ok()?;
    let names = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok());
    newest_complete(names)
}

/// The decision on file names alone.
fn newest_complete(files: impl IntoIterator<Item = String>) -> Option<usize> {
    let mut epochs: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    let mut records: BTreeSet<String> = ["model", "optim"].map(String::from).into();
    for file in files {
        let Some(stem) = file.strip_suffix(".bpk") else {
            continue;
        };
        let Some((record, epoch)) = stem.rsplit_once('-') else {
            continue;
        };
        let Ok(epoch) = epoch.parse::<usize>() else {
            continue;
        };
        records.insert(record.to_string());
        epochs.entry(epoch).or_default().insert(record.to_string());
    }
    epochs
        .into_iter()
        .rev()
        .find(|(_, have)| records.is_subset(have))
        .map(|(epoch, _)| epoch)
}

#[cfg(test)]
mod tests {
    use super::newest_complete;

    fn newest(files: &[&str]) -> Option<usize> {
        newest_complete(files.iter().map(|f| f.to_string()))
    }

    #[test]
    fn the_newest_epoch_with_every_record() {
        assert_eq!(newest(&[]), None);
        assert_eq!(newest(&["model-1.bpk"]), None, "no optimizer state yet");
        assert_eq!(
            newest(&["model-1.bpk", "optim-1.bpk", "model-2.bpk"]),
            Some(1)
        );
        assert_eq!(
            newest(&["model-9.bpk", "optim-9.bpk", "model-10.bpk", "optim-10.bpk"]),
            Some(10),
            "epochs compare as numbers"
        );
        // A scheduler with state writes a third file: an epoch without it is not complete.
        let files = [
            "model-1.bpk",
            "optim-1.bpk",
            "scheduler-1.bpk",
            "model-2.bpk",
            "optim-2.bpk",
        ];
        assert_eq!(newest(&files), Some(1));
        assert_eq!(
            newest(&["model-3.bpk", "optim-3.bpk", "model-4.bpk.tmp", "notes.txt"]),
            Some(3),
            "temporary files and others are ignored"
        );
    }
}
