//! The mean of a vector across the islands, carried in an [`OuterDType`]: the one collective of
//! an outer sync that crosses the slow links.

use phalanx_core::ReduceOp;
use phalanx_pg::ProcessGroup;

use super::codec::OuterDType;

/// Replaces `values` by their mean over `group`'s ranks, every rank giving the same length;
/// bitwise the same result on every rank.
///
/// `f32` is an all-reduce. A quantized dtype cannot be summed as it travels (an 8-bit sum
/// overflows, and each island's block has its own scale), so it goes as a reduce-scatter and an
/// all-gather written out: each rank encodes the part of the vector that each other rank owns
/// and sends it with an all-to-all; the owner decodes the parts, sums them in rank order in
/// `f32`, divides, and encodes its part of the mean; an all-gather brings every part to every
/// rank, which decodes the same bytes. Each rank sends `2 (n - 1) / n` of the encoded vector,
/// as a ring all-reduce of it would (Note [Outer dtype error] bounds the error).
pub(crate) fn mean_across(
    group: &ProcessGroup,
    values: &mut [f32],
    dtype: OuterDType,
) -> phalanx_pg::Result<()> {
    let n = group.world_size();
    if n == 1 {
        return Ok(());
    }
    if dtype == OuterDType::F32 {
        return group.allreduce(values, ReduceOp::Avg);
    }
    let part = values.len().div_ceil(n);
    let encoded = dtype.encoded_len(part);
    let mut padded = vec![0.0f32; part];
    let mut send = Vec::with_capacity(n * encoded);
    for p in 0..n {
        let piece = &values[(p * part).min(values.len())..((p + 1) * part).min(values.len())];
        padded[..piece.len()].copy_from_slice(piece);
        padded[piece.len()..].fill(0.0);
        dtype.encode(&padded, &mut send);
    }
    let mut recv = vec![0u8; n * encoded];
    group.all_to_all(&send, &mut recv)?;
    // This rank's part: every rank's piece of it summed in rank order.
    let mut sum = vec![0.0f32; part];
    for from in recv.chunks_exact(encoded) {
        dtype.decode(from, part, |i, v| sum[i] += v);
    }
    sum.iter_mut().for_each(|v| *v /= n as f32);
    send.clear();
    dtype.encode(&sum, &mut send);
    let mut all = vec![0u8; n * encoded];
    group.allgather(&send, &mut all)?;
    for (p, bytes) in all.chunks_exact(encoded).enumerate() {
        let start = p * part;
        dtype.decode(bytes, part, |i, v| {
            if let Some(slot) = values.get_mut(start + i) {
                *slot = v;
            }
        });
    }
    Ok(())
}
