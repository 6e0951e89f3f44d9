//! Barrier over a [`ShmGroup`]: one step.

use phalanx_transport::{shm::ShmGroup, CollectiveKind, Result};

use crate::{fingerprint::fp, Algorithm};

/// Returns once every rank of `g` has entered the barrier (one step).
pub fn barrier_shm(g: &mut ShmGroup, seq: u64) -> Result<Algorithm> {
    if g.world_size() == 1 {
        return Ok(Algorithm::Local);
    }
    g.step_all(&fp::<u8>(seq, CollectiveKind::Barrier, None, 0, 0))?;
    Ok(Algorithm::Shm)
}
