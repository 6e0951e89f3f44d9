//! What `phalanx train --outer` asks of the rest of the run, checked before anything starts.
//!
//! Note [Islands run]
//! Under `--outer` the world trains in islands (Note [Outer sync] in phalanx-ddp): the engine
//! (DDP, or FSDP under a sharding mode) runs on this rank's island, and every `--sync-every` steps the islands meet in an
//! outer sync. The data is still split over the whole world, as without islands (every rank
//! its own share of each epoch, from the same DistributedSampler), so a run in islands sees
//! the same samples in the same steps as the DDP run of the same world, and the comparison
//! between them is at equal samples. The run's last step is followed by an outer sync whatever
//! the count, so the summary's figures and digest are the global parameters', equal on every
//! rank. Between syncs each island has its own parameters: an epoch line's test accuracy is
//! then each island's model on its ranks' share of the test set, summed over the world (the
//! islands' mean), and is the global model's only when the epoch ends on a sync. Under
//! fault tolerance an island lives and dies whole (Note [Whole blocks] in phalanx-pg): each
//! generation gets its own mesh, and the outer state goes from one to the next (Note [Islands
//! that leave and join] in phalanx-ddp); the ranks agree on a new generation only at outer
//! syncs, over the whole group, since nothing else crosses islands.

use phalanx_checkpoint::position::Position;
use phalanx_pg::ProcessGroup;

use crate::{Error, Result, TrainConfig};

/// Whether `cfg`'s other flags can run in islands.
pub(super) fn check(cfg: &TrainConfig) -> Result<()> {
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
    Ok(())
}

/// Whether every rank of this rank's `island` holds the same step (`held`; `None`: a
/// replacement, or a rank left alone in its island): such an island goes on with its own
/// state after a regroup, any other takes a peer island's (Note [Islands that leave and join]
/// in phalanx-ddp). A collective of the island.
pub(super) fn intact(island: &ProcessGroup, held: Option<Position>) -> Result<bool> {
    let mine = held.map_or(-1, |p| p.global_step as i64);
    let mut all = vec![0i64; island.world_size()];
    island.allgather(&[mine], &mut all)?;
    Ok(mine >= 0 && all.iter().all(|&s| s == mine))
}
