//! What `phalanx train --outer` asks of the rest of the run, checked before anything starts.
//!
//! Note [Islands run]
//! Under `--outer` the world trains in islands (Note [Outer sync] in phalanx-ddp): the engine
//! (DDP) runs on this rank's island, and every `--sync-every` steps the islands meet in an
//! outer sync. The data is still split over the whole world, as without islands (every rank
//! its own share of each epoch, from the same DistributedSampler), so a run in islands sees
//! the same samples in the same steps as the DDP run of the same world, and the comparison
//! between them is at equal samples. The run's last step is followed by an outer sync whatever
//! the count, so the summary's figures and digest are the global parameters', equal on every
//! rank. Between syncs each island has its own parameters: an epoch line's test accuracy is
//! then each island's model on its ranks' share of the test set, summed over the world (the
//! islands' mean), and is the global model's only when the epoch ends on a sync.

use phalanx_ddp::fsdp::Sharding;

use crate::{Error, Result, TrainConfig};

/// Whether `cfg`'s other flags can run in islands (`tolerant`: under `--fault-tolerance`).
pub(super) fn check(cfg: &TrainConfig, tolerant: bool) -> Result<()> {
    let Some(outer) = &cfg.outer else {
        return Ok(());
    };
    let mode = outer.mode;
    let refuse =
        |what: String, why: &str| Err(Error::Config(format!("--outer {mode} with {what}: {why}")));
    if cfg.tp > 1 || cfg.pp.stages > 1 {
        return refuse(
            crate::model_parallel::flags(cfg),
            "islands that cut their model are not built yet (each rank's outer chunk would be a \
             piece of its piece); use --tp 1 --pp 1",
        );
    }
    if cfg.sharding != Sharding::None {
        return refuse(
            format!("--sharding {}", cfg.sharding),
            "an outer sync that sets a sharding engine's parameters is not built yet; use \
             --sharding none inside the islands",
        );
    }
    if tolerant {
        return refuse(
            "--fault-tolerance".into(),
            "islands that leave and join at an outer boundary are not built yet; use \
             --max-restarts",
        );
    }
    if cfg.checkpoint_dir.is_some() {
        return refuse(
            "--checkpoint-dir".into(),
            "checkpoints of the outer state (the global parameters, the outer momentum and \
             each island's inner optimizer) are not built yet",
        );
    }
    Ok(())
}
