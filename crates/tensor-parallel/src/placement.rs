//! Where a parameter's values are across a tensor-parallel group ([`Placement`], DTensor's
//! `Replicate` and `Shard(dim)`), and the whole tensor from the ranks' pieces
//! ([`gather_whole`]): what a digest, a whole checkpoint and an equivalence check need; and
//! which range of a split axis a rank holds ([`shard_range`]).

use std::ops::Range;

use phalanx_pg::ProcessGroup;

use crate::{Error, Result};

/// A parameter's placement on the tensor-parallel group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Every rank holds the whole tensor, the same values.
    Replicate,
    /// Rank `r` of `n` holds the `r`-th of `n` equal ranges of this axis ([`shard_range`]).
    ///
    /// [`shard_range`]: crate::shard_range
    Shard(usize),
}

/// The whole tensor of which every rank of `group` holds `piece`, of shape `shape`, placed as
/// `placement`; a collective of the group (an all-gather) for a shard, a copy for a replica.
///
/// ```
/// use phalanx_tensor_parallel::{gather_whole, Placement};
/// // A 2×4 matrix split by columns on 2 ranks: each holds 2×2.
/// let whole = phalanx_testing::spawn_ranks(2, |pg| {
///     let r = pg.rank() as f32;
///     let piece = [10.0 * r, 10.0 * r + 1.0, 10.0 * r + 2.0, 10.0 * r + 3.0];
///     gather_whole(&piece, &[2, 2], Placement::Shard(1), &pg).unwrap()
/// });
/// assert_eq!(whole[0], [0.0, 1.0, 10.0, 11.0, 2.0, 3.0, 12.0, 13.0]);
/// assert_eq!(whole[0], whole[1]);
/// ```
pub fn gather_whole(
    piece: &[f32],
    shape: &[usize],
    placement: Placement,
    group: &ProcessGroup,
) -> Result<Vec<f32>> {
    let axis = match placement {
        Placement::Replicate => return Ok(piece.to_vec()),
        Placement::Shard(axis) => axis,
    };
    let n = group.world_size();
    if axis >= shape.len() || shape.iter().product::<usize>() != piece.len() {
        return Err(Error::Piece {
            shape: shape.to_vec(),
            len: piece.len(),
            axis,
        });
    }
    let mut gathered = vec![0f32; piece.len() * n];
    group.allgather(piece, &mut gathered)?;
    // Each piece is `outer` runs of `inner` values along the axis and after it; the whole
    // tensor takes run `o` of piece 0, then run `o` of piece 1, and so on.
    let outer: usize = shape[..axis].iter().product();
    let inner = piece.len() / outer.max(1);
    let mut whole = Vec::with_capacity(gathered.len());
    for o in 0..outer {
        for r in 0..n {
            let start = r * piece.len() + o * inner;
            whole.extend_from_slice(&gathered[start..start + inner]);
        }
    }
    Ok(whole)
}

/// The `rank`-th of `size` equal ranges of `0..len`.
///
/// ```
/// assert_eq!(phalanx_tensor_parallel::shard_range("columns", 8, 1, 2)?, 4..8);
/// let err = phalanx_tensor_parallel::shard_range("heads", 4, 0, 3).unwrap_err();
/// assert!(err.to_string().contains("3 ranks cannot split 4 heads"));
/// # Ok::<(), phalanx_tensor_parallel::Error>(())
/// ```
pub fn shard_range(
    what: &'static str,
    len: usize,
    rank: usize,
    size: usize,
) -> Result<Range<usize>> {
    if size == 0 || rank >= size {
        return Err(Error::Rank { rank, size });
    }
    if !len.is_multiple_of(size) {
        return Err(Error::Indivisible { what, len, size });
    }
    let per = len / size;
    Ok(rank * per..(rank + 1) * per)
}
