//! Two-level allreduce for jobs whose hosts hold several ranks each (opt-in:
//! `PHALANX_ALGO=hierarchical`).
//!
//! With `H` hosts of `L` ranks, the buffer is cut into `L` slices; local rank `i` of every host
//! owns slice `i`:
//! 1. reduce-scatter inside each host (ring over the host's ranks): local rank `i` holds its
//!    host's sum of slice `i`;
//! 2. allreduce of slice `i` across hosts, over the *rail* of local rank `i` (the `i`-th rank of
//!    every host; ring reduce-scatter + allgather of the slice cut in `H` pieces);
//! 3. allgather of the slices inside each host.
//!
//! Bytes leaving a host: `L · 2(H−1)/H · S/L = 2(H−1)/H · S`, against `2(n−1)/n · S` on each of
//! the flat ring's host-crossing edges — with 2 hosts of 2 ranks, `S` instead of `1.5 S`; with 2
//! of 8, `S` instead of `1.875 S`. The links inside a host carry the rest.
//!
//! The sums are grouped by host first, so results differ in the last bits from Note [Canonical
//! reduction order]: still identical on every rank and from run to run with the same placement,
//! but not across placements. That is why it is not the default (DESIGN's determinism rule).

use std::ops::Range;

use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{Fingerprint, Result, Transport};

use crate::{kernels, ring, segments, Hierarchy};

/// The two-level allreduce with shared memory inside the host (`g`: this host's ranks, in the
/// order of [`Hierarchy`]'s host list): the host's sum of the whole buffer through
/// [`crate::allreduce_shm`] (at memory speed, so reducing all of it costs less than a
/// reduce-scatter over loopback TCP), the rail allreduce of this rank's slice over TCP, then a
/// shared-memory allgather of the slices.
#[cfg(target_os = "linux")]
pub(crate) fn allreduce_shm<T: Element>(
    t: &mut dyn Transport,
    g: &mut phalanx_transport::shm::ShmGroup,
    seq: u64,
    h: &Hierarchy,
    buf: &mut [T],
    op: ReduceOp,
    chunk: usize,
) -> Result<()> {
    let (host, rail, local) = h.rings(t.rank());
    assert_eq!(
        (g.world_size(), g.rank()),
        (host.len(), local),
        "the host's shared-memory group follows the hierarchy"
    );
    let fp = crate::fingerprint::fp::<T>(
        seq,
        phalanx_transport::CollectiveKind::Allreduce,
        Some(op),
        buf.len(),
        0,
    );
    // Avg divides once, by the whole world, at the end.
    let sum = if op == ReduceOp::Avg {
        ReduceOp::Sum
    } else {
        op
    };
    crate::allreduce_shm(g, seq, buf, sum)?;
    let count = buf.len();
    let slice = |i: usize| segments::segment(count, host.len(), i);
    let mine = slice(local);
    let piece = |j: usize| -> Range<usize> {
        let p = segments::segment(mine.len(), rail.len(), j);
        mine.start + p.start..mine.start + p.end
    };
    ring::reduce_scatter(t, &fp, &rail, buf, &piece, sum, chunk)?;
    let pos = rail
        .iter()
        .position(|&r| r == t.rank())
        .expect("in its rail");
    kernels::finish(op, &mut buf[piece(pos)], h.world_size());
    ring::allgather(t, &fp, &rail, buf, &piece, chunk)?;
    crate::shm::allgather_slices(g, &fp, buf, &slice)
}

/// The two-level allreduce described in the module docs.
pub(crate) fn allreduce<T: Element>(
    t: &mut dyn Transport,
    fp: &Fingerprint,
    h: &Hierarchy,
    buf: &mut [T],
    op: ReduceOp,
    chunk: usize,
) -> Result<()> {
    let (host, rail, local) = h.rings(t.rank());
    let count = buf.len();
    let slice = |i: usize| segments::segment(count, host.len(), i);
    ring::reduce_scatter(t, fp, host, buf, &slice, op, chunk)?;
    let mine = slice(local);
    let piece = |j: usize| -> Range<usize> {
        let p = segments::segment(mine.len(), rail.len(), j);
        mine.start + p.start..mine.start + p.end
    };
    ring::reduce_scatter(t, fp, &rail, buf, &piece, op, chunk)?;
    let hosts_pos = rail
        .iter()
        .position(|&r| r == t.rank())
        .expect("in its rail");
    kernels::finish(op, &mut buf[piece(hosts_pos)], h.world_size());
    ring::allgather(t, fp, &rail, buf, &piece, chunk)?;
    ring::allgather(t, fp, host, buf, &slice, chunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_takes_two_levels_only_when_asked_and_large() {
        use crate::select::{select, Op, Placement, Plan};
        use crate::Options;
        let hosts = ["a", "a", "b", "b"];
        let o = Options {
            hierarchy: Hierarchy::from_host_keys(&hosts),
            ..Options::default()
        };
        assert!(o.hierarchy.is_some());
        let big = 1 << 20;
        assert_eq!(
            select(Op::Allreduce, big, 4, Placement::HostSharedMemory, &o),
            Plan::HierarchicalShm
        );
        assert_eq!(
            select(Op::Allreduce, big, 4, Placement::Tcp, &o),
            Plan::Hierarchical
        );
        assert_eq!(
            select(Op::Allreduce, 1024, 4, Placement::Tcp, &o),
            Plan::Direct
        );
        // Another world size than the hierarchy's: flat.
        assert_eq!(
            select(Op::Allreduce, big, 3, Placement::Tcp, &o),
            Plan::Ring
        );
        // Only allreduce has a two-level form.
        assert_eq!(
            select(Op::Broadcast, big, 4, Placement::Tcp, &o),
            Plan::Ring
        );
    }
}
