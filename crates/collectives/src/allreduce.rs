//! allreduce: direct exchange for small buffers, the pipelined ring (or the two-level
//! [`Hierarchy`](crate::Hierarchy)) for large ones, as [`select`] decides.

use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{CollectiveKind, Result, Transport};

use crate::{
    direct, fingerprint::fp, hierarchical, kernels, options::chunk_elems, ring, segments, select,
    Algorithm, Op, Options, Placement, Plan,
};

/// Reduces `buf` across ranks in place; every rank ends with the same bits.
pub fn allreduce<T: Element>(
    t: &mut dyn Transport,
    seq: u64,
    buf: &mut [T],
    op: ReduceOp,
    opts: &Options,
) -> Result<Algorithm> {
    let n = t.world_size();
    let fp = fp::<T>(seq, CollectiveKind::Allreduce, Some(op), buf.len(), 0);
    let bytes = std::mem::size_of_val(buf);
    let algo = match select(Op::Allreduce, bytes, n, Placement::Tcp, opts) {
        Plan::Local => Algorithm::Local,
        Plan::Direct => {
            direct::allreduce(t, &fp, buf, op)?;
            Algorithm::Direct
        }
        Plan::Hierarchical => {
            let h = opts.hierarchy.as_ref().expect("select saw a hierarchy");
            hierarchical::allreduce(t, &fp, h, buf, op, chunk_elems::<T>(opts))?;
            return Ok(Algorithm::Hierarchical);
        }
        _ => {
            let count = buf.len();
            let segs = move |s| segments::segment(count, n, s);
            let all = ring::everyone(n);
            ring::reduce_scatter(t, &fp, &all, buf, &segs, op, chunk_elems::<T>(opts))?;
            let mine = segs(t.rank());
            kernels::finish(op, &mut buf[mine], n);
            ring::allgather(t, &fp, &all, buf, &segs, chunk_elems::<T>(opts))?;
            return Ok(Algorithm::Ring);
        }
    };
    kernels::finish(op, buf, n);
    Ok(algo)
}

/// [`allreduce`] for a job spread over several hosts whose ranks share memory with their
/// host's other ranks (`g`, ordered as [`Hierarchy::host_of`](crate::Hierarchy::host_of)): above
/// `direct_max_bytes` and with `opts.hierarchy` set, the two-level algorithm with shared memory
/// inside the host; otherwise exactly [`allreduce`] over `t`.
#[cfg(target_os = "linux")]
pub fn allreduce_hierarchical_shm<T: Element>(
    t: &mut dyn Transport,
    g: &mut phalanx_transport::shm::ShmGroup,
    seq: u64,
    buf: &mut [T],
    op: ReduceOp,
    opts: &Options,
) -> Result<Algorithm> {
    let n = t.world_size();
    let bytes = std::mem::size_of_val(buf);
    match (
        select(Op::Allreduce, bytes, n, Placement::HostSharedMemory, opts),
        opts.hierarchy.as_ref(),
    ) {
        (Plan::HierarchicalShm, Some(h)) => {
            hierarchical::allreduce_shm(t, g, seq, h, buf, op, chunk_elems::<T>(opts))?;
            Ok(Algorithm::Hierarchical)
        }
        _ => allreduce(t, seq, buf, op, opts),
    }
}
