//! Broadcast over a [`ShmGroup`]: the root publishes one buffer-sized chunk per step, every
//! other rank copies it out.

use phalanx_core::Element;
use phalanx_transport::{
    shm::{BufferId, ShmGroup},
    CollectiveKind, Result,
};

use super::bytes::{as_bytes, as_bytes_mut, byte_range};
use crate::{fingerprint::fp, segments, select::shm_single_copy, Algorithm, Op};

/// Copies `root`'s `buf` to every rank of `g`, one buffer-sized chunk per step.
pub fn broadcast_shm<T: Element>(
    g: &mut ShmGroup,
    seq: u64,
    buf: &mut [T],
    root: usize,
) -> Result<Algorithm> {
    let (n, r) = (g.world_size(), g.rank());
    assert!(
        root < n,
        "broadcast root {root} out of range for world size {n}"
    );
    if n == 1 || buf.is_empty() {
        return Ok(Algorithm::Local);
    }
    let fp = fp::<T>(seq, CollectiveKind::Broadcast, None, buf.len(), root);
    // When the root's memory is read directly: Note [Choosing an algorithm].
    let bytes = std::mem::size_of_val(buf);
    if shm_single_copy(Op::Broadcast, bytes, n, g.single_copy()) {
        if r == root {
            g.expose(as_bytes(buf));
        }
        g.step_all(&fp)?;
        if r != root {
            g.read_exposed(root, 0, as_bytes_mut(buf))?;
        }
        // The root keeps `buf` unchanged until every rank has read it.
        g.step_all(&fp)?;
        return Ok(Algorithm::Shm);
    }
    let chunk = (g.buffer_bytes() / std::mem::size_of::<T>()).max(1);
    let all = 0..buf.len();
    for k in 0..segments::num_chunks(buf.len(), chunk) {
        let c = segments::chunk(&all, chunk, k);
        let bytes = byte_range::<T>(0, c.len());
        let b: BufferId = g.next_buffer();
        if r == root {
            // SAFETY: as in the allreduce's `small`: peers finished with this buffer's previous use.
            unsafe { g.own_buffer_mut(b, bytes.clone()) }
                .copy_from_slice(as_bytes(&buf[c.clone()]));
        }
        g.step_all(&fp)?;
        if r != root {
            // SAFETY: the root wrote these bytes before the step just waited for and rewrites
            // buffer `b` only after this rank's next step.
            let src = unsafe { g.buffer(root, b, bytes) };
            buf[c].copy_from_slice(bytemuck::cast_slice(src));
        }
    }
    Ok(Algorithm::Shm)
}
