//! Allgather of per-rank slices of one buffer over a [`ShmGroup`]: the last phase of the
//! hierarchical allreduce inside a host. Rank `r` owns `slice(r)`; per chunk, every rank copies
//! its slice's chunk into its own shared buffer, one step publishes them all, and every rank
//! copies the peers' chunks out.

use std::ops::Range;

use phalanx_core::Element;
use phalanx_transport::{shm::ShmGroup, Fingerprint, Result};

use crate::segments;

/// After this, every rank's `buf` holds every rank's `slice(p)`.
pub(crate) fn allgather_slices<T: Element>(
    g: &mut ShmGroup,
    fp: &Fingerprint,
    buf: &mut [T],
    slice: &dyn Fn(usize) -> Range<usize>,
) -> Result<()> {
    let (n, r) = (g.world_size(), g.rank());
    let size = std::mem::size_of::<T>();
    let chunk = (g.buffer_bytes() / size).max(1);
    let chunks = (0..n)
        .map(|p| segments::num_chunks(slice(p).len(), chunk))
        .max()
        .unwrap_or(0);
    for k in 0..chunks {
        let b = g.next_buffer();
        let mine = segments::chunk(&slice(r), chunk, k);
        // SAFETY: peers last read buffer `b` in the use before the previous one and finished
        // before that use's step, which this rank has passed (Note [Shared-memory protocol]).
        unsafe { g.own_buffer_mut(b, 0..mine.len() * size) }
            .copy_from_slice(bytemuck::cast_slice(&buf[mine]));
        g.step_all(fp)?;
        for p in (0..n).filter(|&p| p != r) {
            let theirs = segments::chunk(&slice(p), chunk, k);
            // SAFETY: `p` wrote these bytes before the step just waited for and rewrites
            // buffer `b` only after this rank publishes its next step.
            let src = unsafe { g.buffer(p, b, 0..theirs.len() * size) };
            buf[theirs].copy_from_slice(bytemuck::cast_slice(src));
        }
    }
    Ok(())
}
