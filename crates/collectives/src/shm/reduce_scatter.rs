//! reduce_scatter among the ranks of one host, through the shared-memory allreduce.

use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{shm::ShmGroup, CollectiveKind, Result};

use super::allreduce::{reduce_all, ShmOptions};
use crate::Algorithm;

/// reduce_scatter among ranks that all share memory: the shared-memory all-reduce of `send`
/// (fingerprinted as a reduce_scatter, so a rank calling the other one is still named), then
/// this rank's block into `recv` (the all-reduce has already finished `Avg`). It moves more
/// bytes than a dedicated reduce-scatter would, but through shared memory that costs less than
/// the TCP ring's 2(n-1) steps (measured in docs/collectives.md).
pub fn reduce_scatter_shm<T: Element>(
    g: &mut ShmGroup,
    seq: u64,
    send: &mut [T],
    recv: &mut [T],
    op: ReduceOp,
) -> Result<Algorithm> {
    let (n, r, per) = (g.world_size(), g.rank(), recv.len());
    assert_eq!(
        send.len(),
        per * n,
        "reduce_scatter: send must hold world_size × recv"
    );
    let algo = reduce_all(
        g,
        seq,
        send,
        op,
        &ShmOptions::default(),
        CollectiveKind::ReduceScatter,
    )?;
    recv.copy_from_slice(&send[r * per..(r + 1) * per]);
    Ok(algo)
}
