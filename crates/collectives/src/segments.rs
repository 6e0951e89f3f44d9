//! How a buffer is cut into segments (one per rank) and chunks (one per frame).
//!
//! Note [Canonical reduction order]: every reducing algorithm reduces segment `s` of a buffer
//! of `count` elements over `world` ranks in the same order, `x[s+1] ⊕ x[s+2] ⊕ … ⊕ x[s]`
//! (ranks taken modulo `world`, left to right), which is the order the ring's reduce-scatter
//! produces naturally. The order depends only on `count` and `world`, never on the algorithm,
//! the transport or where ranks run, so results are bitwise reproducible across placements.
//! (⊕ is commutative in IEEE arithmetic, so only the grouping matters.)

use std::ops::Range;

/// Segment `s` of `count` elements split over `world` ranks: the first `count % world`
/// segments hold one element more.
pub fn segment(count: usize, world: usize, s: usize) -> Range<usize> {
    let base = count / world;
    let extra = count % world;
    let start = s * base + s.min(extra);
    let len = base + usize::from(s < extra);
    start..start + len
}

/// Where each block of a buffer cut into blocks of `counts` elements starts, and the total
/// last: `[0, c0, c0 + c1, …, Σc]` (the blocks of allgather_v and reduce_scatter_v).
pub fn block_offsets(counts: &[usize]) -> Vec<usize> {
    std::iter::once(0)
        .chain(counts.iter().scan(0, |at, &c| {
            *at += c;
            Some(*at)
        }))
        .collect()
}

/// Number of chunks of at most `chunk` elements covering `len` elements.
pub fn num_chunks(len: usize, chunk: usize) -> usize {
    len.div_ceil(chunk.max(1))
}

/// Chunk `j` of a range split into chunks of at most `chunk` elements.
pub fn chunk(range: &Range<usize>, chunk: usize, j: usize) -> Range<usize> {
    let chunk = chunk.max(1);
    let start = (range.start + j * chunk).min(range.end);
    start..(start + chunk).min(range.end)
}

/// The order in which ranks' contributions to segment `s` are folded.
pub fn canonical_order(world: usize, s: usize) -> impl Iterator<Item = usize> {
    (1..=world).map(move |k| (s + k) % world)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn segments_tile_the_buffer(count in 0usize..10_000, world in 1usize..17) {
            let mut next = 0;
            for s in 0..world {
                let r = segment(count, world, s);
                prop_assert_eq!(r.start, next);
                prop_assert!(r.len() <= count / world + 1);
                next = r.end;
            }
            prop_assert_eq!(next, count);
        }

        #[test]
        fn chunks_tile_a_segment(start in 0usize..1000, len in 0usize..5000, c in 1usize..700) {
            let r = start..start + len;
            let mut next = r.start;
            for j in 0..num_chunks(len, c) {
                let ch = chunk(&r, c, j);
                prop_assert_eq!(ch.start, next);
                prop_assert!(!ch.is_empty() && ch.len() <= c);
                next = ch.end;
            }
            prop_assert_eq!(next, r.end);
        }
    }

    #[test]
    fn order_ends_with_owner() {
        let o: Vec<_> = canonical_order(4, 1).collect();
        assert_eq!(o, vec![2, 3, 0, 1]);
    }
}
