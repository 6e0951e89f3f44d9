//! Where the blocks are cut into stages: given (`--pp-split`), or balanced by parameters.

use crate::model::PipelineCosts;

/// The first block of each of `stages` virtual stages: `split`'s cut points, checked, or the
/// cut that makes the largest stage's parameters (the embedding's on the first, the head's on
/// the last) as small as it can be. Refused, naming the numbers, where the blocks cannot give
/// every stage one.
pub(crate) fn stage_starts(
    costs: &PipelineCosts,
    stages: usize,
    split: Option<&[usize]>,
    what: &str,
) -> Result<Vec<usize>, String> {
    let n = costs.blocks.len();
    if stages > n {
        return Err(format!(
            "{what} cuts the model into {stages} stages of at least one block each, but it has \
             {n} blocks (--depth {n})"
        ));
    }
    if let Some(split) = split {
        if split.len() != stages - 1 {
            return Err(format!(
                "--pp-split names {} cut point(s); {what} has {stages} stages, so it needs {} \
                 (the first block of each stage after the first)",
                split.len(),
                stages - 1
            ));
        }
        let mut prev = 0;
        for &at in split {
            if at <= prev || at >= n {
                return Err(format!(
                    "--pp-split {}: each cut point is a block index in 1..{n}, in increasing \
                     order (block {at} cannot start a stage)",
                    split
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                ));
            }
            prev = at;
        }
        return Ok(std::iter::once(0).chain(split.iter().copied()).collect());
    }
    Ok(balanced(costs, stages))
}

/// The cut minimising the largest stage (dynamic programming over the cut points).
fn balanced(costs: &PipelineCosts, stages: usize) -> Vec<usize> {
    let n = costs.blocks.len();
    let mut prefix = vec![0usize; n + 1];
    for (i, c) in costs.blocks.iter().enumerate() {
        prefix[i + 1] = prefix[i] + c;
    }
    let stage_cost = |s: usize, from: usize, to: usize| {
        let mut c = prefix[to] - prefix[from];
        if s == 0 {
            c += costs.first;
        }
        if s == stages - 1 {
            c += costs.last;
        }
        c
    };
    // best[s][i]: the smallest largest stage of the first i blocks in s + 1 stages, and where
    // the last of them starts.
    let mut best = vec![vec![(usize::MAX, 0usize); n + 1]; stages];
    for (i, cell) in best[0].iter_mut().enumerate().skip(1) {
        *cell = (stage_cost(0, 0, i), 0);
    }
    for s in 1..stages {
        for i in s + 1..=n {
            for j in s..i {
                let (before, _) = best[s - 1][j];
                if before == usize::MAX {
                    continue;
                }
                let worst = before.max(stage_cost(s, j, i));
                if worst < best[s][i].0 {
                    best[s][i] = (worst, j);
                }
            }
        }
    }
    let mut starts = vec![0; stages];
    let mut end = n;
    for s in (1..stages).rev() {
        starts[s] = best[s][end].1;
        end = starts[s];
    }
    starts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs(first: usize, blocks: &[usize], last: usize) -> PipelineCosts {
        PipelineCosts {
            first,
            blocks: blocks.to_vec(),
            last,
        }
    }

    #[test]
    fn equal_blocks_are_cut_evenly() {
        assert_eq!(
            stage_starts(&costs(0, &[5; 8], 0), 4, None, "--pp 4").unwrap(),
            [0, 2, 4, 6]
        );
    }

    #[test]
    fn the_embedding_and_the_head_weigh_on_their_stages() {
        // A heavy embedding: the first stage takes fewer blocks.
        assert_eq!(
            stage_starts(&costs(20, &[10; 6], 0), 2, None, "--pp 2").unwrap(),
            [0, 2]
        );
        assert_eq!(
            stage_starts(&costs(0, &[10; 6], 20), 2, None, "--pp 2").unwrap(),
            [0, 4]
        );
    }

    #[test]
    fn a_given_split_is_kept_and_checked() {
        let c = costs(0, &[1; 4], 0);
        assert_eq!(stage_starts(&c, 2, Some(&[3]), "--pp 2").unwrap(), [0, 3]);
        let e = stage_starts(&c, 2, Some(&[4]), "--pp 2").unwrap_err();
        assert!(e.contains("block 4 cannot start a stage"), "{e}");
        let e = stage_starts(&c, 3, Some(&[1]), "--pp 3").unwrap_err();
        assert!(
            e.contains("names 1 cut point(s); --pp 3 has 3 stages"),
            "{e}"
        );
        let e = stage_starts(&c, 5, None, "--pp 5").unwrap_err();
        assert!(e.contains("--pp 5 cuts the model into 5 stages"), "{e}");
        assert!(e.contains("it has 4 blocks"), "{e}");
    }
}
