//! The plan of a regroup of shards (Note [Regroup of shards] in `shards.rs`): from what every
//! rank of the new group said it holds, which step the group goes on from, which rank is the
//! source of the position and the whole tensors, and which rank provides which elements of
//! each parameter. Pure functions of what was said, the same on every rank; `shards.rs` does
//! the transfer.

use std::ops::Range;

use phalanx_ddp::adapter::ParamInfo;

use crate::{Error, Result};

/// Which step the group goes on from, and who is where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Steps {
    /// The newest step any rank holds, or holds the averaged gradients of.
    pub(super) newest: i64,
    /// Each rank's step once the ranks one step behind that hold that step's gradients have
    /// taken it (Note [Commit vote] in phalanx-ddp).
    pub(super) after_pending: Vec<i64>,
    /// The lowest rank whose own step is the newest: it sends the position, the buffers and
    /// the discrete tensors.
    pub(super) source: usize,
}

impl Steps {
    /// From each rank's own step (-1: a replacement, no state) and whether it holds a pending
    /// step's gradients. The group cannot go on when no rank holds a state.
    pub(super) fn agree(said: &[(i64, bool)]) -> Result<Steps> {
        let newest = said.iter().map(|s| s.0).max().expect("a group has a rank");
        if newest < 0 {
            return Err(Error::Config(
                "fault tolerance: no rank of the new process group holds the training state".into(),
            ));
        }
        // A rank one step behind with that step's gradients takes it: a vote completed, so
        // every rank was to.
        let after_pending = said
            .iter()
            .map(|&(step, pending)| match step + 1 == newest && pending {
                true => newest,
                false => step,
            })
            .collect();
        let source = said
            .iter()
            .position(|s| s.0 == newest)
            .expect("the newest is someone's");
        Ok(Steps {
            newest,
            after_pending,
            source,
        })
    }
}

/// Who provides which elements: `provides[rank][param]` are the ranges of parameter `param`
/// that `rank` sends, the lowest rank holding each element providing it. `held(rank, param)`
/// is the range a rank holds (empty: none, or not of the newest step). An element no rank
/// holds (every copy of a shard lost) is refused, naming its parameter.
pub(super) fn providers(
    infos: &[ParamInfo],
    world: usize,
    held: impl Fn(usize, usize) -> Range<usize>,
) -> Result<Vec<Vec<Vec<Range<usize>>>>> {
    let mut provides: Vec<Vec<Vec<Range<usize>>>> = vec![vec![Vec::new(); infos.len()]; world];
    for (p, info) in infos.iter().enumerate() {
        let mut covered: Vec<Range<usize>> = Vec::new();
        for (r, mine) in provides.iter_mut().enumerate() {
            for part in subtract(held(r, p), &covered) {
                covered.push(part.clone());
                mine[p].push(part);
            }
        }
        let got: usize = covered.iter().map(Range::len).sum();
        if got != info.numel() {
            return Err(Error::Config(format!(
                "fault tolerance: the ranks alive hold {got} of the {} elements of {} (every \
                 copy of a shard was lost): the run cannot go on in process; --max-restarts \
                 restarts it from the newest sharded checkpoint",
                info.numel(),
                info.name
            )));
        }
    }
    Ok(provides)
}

/// `range` without the parts in `covered`.
fn subtract(range: Range<usize>, covered: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut parts = vec![range];
    for c in covered {
        parts = parts
            .into_iter()
            .flat_map(|r| {
                let mut out = Vec::new();
                if r.start < c.start.min(r.end) {
                    out.push(r.start..c.start.min(r.end));
                }
                if c.end.max(r.start) < r.end {
                    out.push(c.end.max(r.start)..r.end);
                }
                out
            })
            .collect();
    }
    parts.into_iter().filter(|r| !r.is_empty()).collect()
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    #[test]
    fn subtracting_covered_parts_leaves_the_rest() {
        assert_eq!(subtract(0..10, &[]), vec![0..10]);
        assert_eq!(subtract(0..10, &[0..10]), Vec::<Range<usize>>::new());
        assert_eq!(subtract(0..10, &[3..5]), vec![0..3, 5..10]);
        assert_eq!(subtract(0..10, &[8..20, 0..2]), vec![2..8]);
        assert_eq!(subtract(5..10, &[0..3]), vec![5..10]);
    }

    #[test]
    fn a_rank_one_step_behind_with_the_gradients_takes_the_step() {
        // Rank 0's vote failed (pending), rank 1's completed, rank 2 is a replacement, rank 3
        // is one behind without the gradients (it cannot happen after a vote; it stays).
        let steps = Steps::agree(&[(6, true), (7, false), (-1, false), (6, false)]).unwrap();
        assert_eq!(steps.newest, 7);
        assert_eq!(steps.after_pending, [7, 7, -1, 6]);
        // The source is the lowest rank whose *own* step is the newest.
        assert_eq!(steps.source, 1);
        let tie = Steps::agree(&[(-1, false), (4, false), (4, false)]).unwrap();
        assert_eq!((tie.newest, tie.source), (4, 1));
    }

    #[test]
    fn a_group_of_replacements_cannot_go_on() {
        let e = Steps::agree(&[(-1, false), (-1, false)]).unwrap_err();
        assert!(
            e.to_string()
                .contains("no rank of the new process group holds"),
            "{e}"
        );
    }

    fn info(name: &str, numel: usize) -> ParamInfo {
        ParamInfo {
            name: name.into(),
            shape: vec![numel],
        }
    }

    #[test]
    fn the_lowest_rank_holding_an_element_provides_it() {
        // Hybrid, 2 shard groups of 2, rank 1 lost: ranks 0, 2 and 3 of the old layout are 0, 1,
        // 2 now; old rank 1's half (5..10) lives on its replica (now rank 2).
        let held = |r: usize, _p: usize| match r {
            0 => 0..5,
            1 => 0..5,
            _ => 5..10,
        };
        let provides = providers(&[info("w", 10)], 3, held).unwrap();
        assert_eq!(
            provides,
            vec![vec![vec![0..5]], vec![vec![]], vec![vec![5..10]]]
        );
    }

    #[test]
    fn an_element_no_rank_holds_is_named_with_its_parameter() {
        let held = |r: usize, p: usize| match (r, p) {
            (0, 0) => 0..4,
            (_, 1) => 0..3,
            _ => 0..0,
        };
        let e = providers(&[info("w", 4), info("fc.bias", 6)], 2, held).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("hold 3 of the 6 elements of fc.bias"), "{e}");
        assert!(e.contains("--max-restarts"), "{e}");
    }
}
