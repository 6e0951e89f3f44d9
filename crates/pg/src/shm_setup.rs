//! Shared-memory bootstrap: when every rank of the group runs on one host, the ranks map each
//! other's segments under `/dev/shm` and allreduce, broadcast and barrier go through memory
//! instead of loopback TCP (see `phalanx_transport::shm`).
//!
//! "One host" is decided from the peer table (`bootstrap/`): each rank's entry carries the
//! host's boot id, hostname and its node (launcher agent) rank, so ranks of different agents
//! never share memory even when they share a kernel (the network-namespace test hosts). All
//! ranks vote through the store before any of them uses shared memory, so a rank that cannot
//! create its segment makes the whole group fall back to TCP instead of deadlocking it.

use std::time::Duration;

use phalanx_core::env;
use phalanx_store::Store;
use phalanx_transport::shm::{ShmGroup, ShmSegment, DEFAULT_BUFFER_BYTES};

use crate::{Error, Result};

/// Joins the shared-memory group `members` (global ranks, this rank among them) when the
/// options allow it and `PHALANX_SHM_DISABLE` is not set; `None` otherwise (TCP carries
/// everything). `members` is every rank when all share this host, or this host's ranks for
/// the hierarchical allreduce; `None` when no group applies. All ranks vote in `world` (every
/// rank of the job), so one failure anywhere makes everyone fall back together.
pub(crate) fn try_join(
    store: &dyn Store,
    rank: usize,
    world: usize,
    members: Option<&[usize]>,
    timeout: Duration,
    wanted: bool,
) -> Result<Option<ShmGroup>> {
    let store_err = |source| Error::Store { rank, source };
    let disabled = env::get(env::PHALANX_SHM_DISABLE).is_some_and(|v| v != "0");
    // Every rank sees the same table and environment flag (the launcher sets one for all),
    // so all of them take this early return together or none does.
    let Some(members) = members.filter(|m| m.len() >= 2 && wanted && !disabled) else {
        return Ok(None);
    };
    let local = members
        .iter()
        .position(|&m| m == rank)
        .expect("a rank is a member of its own group");
    // One nonce per group keeps concurrent jobs (and test threads) apart in /dev/shm.
    let nonce = {
        let mut n = [0u8; 6];
        getrandom::fill(&mut n).expect("the OS random source is available");
        phalanx_core::hex::encode(&n)
    };
    let nonce = String::from_utf8_lossy(
        &store
            .compare_set("pg/shm/nonce", b"", nonce.as_bytes())
            .map_err(store_err)?,
    )
    .into_owned();
    let name = |r: usize| format!("phalanx-{nonce}-{r}");
    let bytes = ShmGroup::segment_bytes(DEFAULT_BUFFER_BYTES);
    let own = match ShmSegment::create(&name(rank), bytes) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(rank, "shared memory unavailable, using TCP: {e}");
            None
        }
    };
    let all_ok = crate::bootstrap::vote(store, "pg/shm/ok", rank, world, own.is_some(), timeout)?;
    let Some(mut own) = own.filter(|_| all_ok) else {
        return Ok(None);
    };
    let setup = |source| Error::Setup { rank, source };
    let peers = members
        .iter()
        .map(|&p| {
            (p != rank)
                .then(|| ShmSegment::open(&name(p), bytes))
                .transpose()
        })
        .collect::<phalanx_transport::Result<Vec<_>>>();
    // Every peer mapped every segment (or gave up): the names can go, so that nothing is left
    // in /dev/shm however the processes end.
    crate::bootstrap::vote(store, "pg/shm/opened", rank, world, peers.is_ok(), timeout)?;
    own.unlink();
    let peers = peers.map_err(setup)?;
    let group = ShmGroup::new(local, members.len(), own, peers, timeout).map_err(setup)?;
    tracing::info!(rank, members = ?members, segment = %name(rank), buffer_bytes = DEFAULT_BUFFER_BYTES, "phalanx: shared memory joined");
    Ok(Some(group))
}

/// This host (boot id and hostname) and node agent: ranks with equal ids may share memory.
pub(crate) fn host_id(node: usize) -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    // No whitespace: the id travels in a space-separated entry (bootstrap/mod.rs).
    format!("{}/{}/{node}", boot.trim(), host.trim()).replace(char::is_whitespace, "_")
}
