//! What a rank's outer sync holds and costs, apart from the mesh it runs on: the figures
//! ([`OuterStats`]), the state that goes from one generation's [`DiLoCo`](super::DiLoCo) to the
//! next under fault tolerance ([`OuterState`], Note [Islands that leave and join]) and the
//! state a checkpoint keeps ([`OuterSnapshot`], Note [Island checkpoints] in phalanx-train).

use std::time::Duration;

use super::fragment::{chunk_of, Fragment};
use crate::{Error, Result};

/// What the outer syncs cost so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OuterStats {
    /// Outer syncs done (under streaming DiLoCo, each fragment's sync counts once).
    pub syncs: u64,
    /// Wall time inside them.
    pub wait: Duration,
    /// Bytes this rank sent across islands (the encoded pseudo-gradient's share of the ring
    /// or of the all-to-all and all-gather, by the algorithm's count, not the wire's).
    pub bytes_across: u64,
}

/// What a rank's outer sync holds between two attempts of a run under fault tolerance
/// ([`DiLoCo::into_state`](super::DiLoCo::into_state), [`DiLoCo::heal`](super::DiLoCo::heal)): this rank's chunks of the global parameters and
/// momentum, where the schedule stands, and the figures.
#[derive(Debug, Clone)]
pub struct OuterState {
    pub(super) lens: Vec<usize>,
    pub(super) fragments: Vec<Fragment>,
    /// The island rank whose chunks these are.
    pub(super) chunk_of: usize,
    pub(super) steps: u64,
    pub(super) synced_at: u64,
    pub(super) stats: OuterStats,
    /// Read from a checkpoint: the chunks, laid out when the engine is at hand.
    pub(super) saved: Option<OuterSnapshot>,
}

/// What a rank's outer sync holds, as a checkpoint keeps it ([`DiLoCo::snapshot`](super::DiLoCo::snapshot),
/// [`OuterState::restore`]): where the schedule stands, this rank's chunk of each fragment's
/// global parameters and momentum, and the pseudo-gradient of a sync under way.
#[derive(Debug, Clone, PartialEq)]
pub struct OuterSnapshot {
    /// Inner steps since the start.
    pub steps: u64,
    /// The inner step whose sync ended last.
    pub synced_at: u64,
    /// Syncs done.
    pub syncs: u64,
    /// This rank's island.
    pub island: usize,
    /// This rank's rank in its island: which chunk it holds.
    pub chunk_of: usize,
    /// Ranks per island.
    pub island_size: usize,
    /// Each fragment's chunk of the global parameters.
    pub global: Vec<Vec<f32>>,
    /// Each fragment's chunk of the outer momentum.
    pub momentum: Vec<Vec<f32>>,
    /// The fragment whose sync is under way, and the pseudo-gradient it sent.
    pub pending: Option<(usize, Vec<f32>)>,
}

impl OuterState {
    /// The state a checkpoint kept, for [`DiLoCo::heal`](super::DiLoCo::heal): resumed at the same layout, the run
    /// goes on bitwise as if never stopped.
    pub fn restore(saved: OuterSnapshot) -> OuterState {
        OuterState {
            lens: Vec::new(),
            fragments: Vec::new(),
            chunk_of: saved.chunk_of,
            steps: saved.steps,
            synced_at: saved.synced_at,
            stats: OuterStats {
                syncs: saved.syncs,
                ..OuterStats::default()
            },
            saved: Some(saved),
        }
    }
}

impl OuterSnapshot {
    /// The outer state of one island, put together from its ranks' snapshots (`chunks`, in
    /// island-rank order), and cut for rank `j` of islands of `n`, island `island` (Note [A
    /// resume at another layout]), a sync under way included.
    ///
    /// Note [A resume at another layout]
    /// Every rank of an island holds chunk `j` of each fragment's global parameters and outer
    /// momentum, cut for its island's size. The islands hold the same outer state (each outer
    /// sync ends with it equal everywhere), so one island's chunks, laid end to end, are the
    /// whole of it, and any other layout's chunks can be cut from them. The islands' models
    /// and inner optimizers differ between syncs: a resume at another layout starts every
    /// island from island 0's, so the run goes on as if the other islands had done what
    /// island 0 did since the last sync. It is therefore not the uninterrupted run bitwise (a
    /// resume at the same layout is). A streaming sync under way holds each rank's chunk of
    /// the pseudo-gradient its island sent across islands, whose mean was still to come. In
    /// keeping with the rest, every island of the new layout sends island 0's again: its
    /// chunks, laid end to end, are cut as the global parameters are, and the sync ends at
    /// the step it was due with island 0's pseudo-gradient as the mean. Dropping it instead
    /// would lose nothing of the model (the island's progress stays in its parameters, and
    /// the fragment's next sync would carry it), but would move the schedule: that fragment
    /// would skip an outer step the uninterrupted run takes.
    pub fn reshaped(
        chunks: &[OuterSnapshot],
        island: usize,
        (n, j): (usize, usize),
    ) -> Result<OuterSnapshot> {
        let reason = |reason: String| Err(Error::Outer { reason });
        let Some(first) = chunks.first() else {
            return reason("no island rank's outer state to resume from".into());
        };
        for (i, c) in chunks.iter().enumerate() {
            let same = (c.steps, c.synced_at, c.syncs, c.global.len())
                == (
                    first.steps,
                    first.synced_at,
                    first.syncs,
                    first.global.len(),
                );
            if c.chunk_of != i || c.island_size != chunks.len() || !same {
                return reason(format!(
                    "island rank {i}'s outer state is not chunk {i} of {} of the same sync \
                     (chunk {} of {}, {} steps, {} syncs, against {} steps, {} syncs)",
                    chunks.len(),
                    c.chunk_of,
                    c.island_size,
                    c.steps,
                    c.syncs,
                    first.steps,
                    first.syncs
                ));
            }
            let (fragment, sent) = match (&c.pending, &first.pending) {
                (None, None) => continue,
                (Some((f, sent)), Some((f0, _))) if f == f0 => (*f, sent),
                (mine, theirs) => {
                    let said = |p: &Option<(usize, Vec<f32>)>| match p {
                        Some((f, _)) => format!("the sync of fragment {f} under way"),
                        None => "no sync under way".into(),
                    };
                    return reason(format!(
                        "island rank {i}'s outer state has {}, island rank 0's {}: the \
                         files are not of one checkpoint",
                        said(mine),
                        said(theirs)
                    ));
                }
            };
            let chunk = c.global.get(fragment).map_or(0, Vec::len);
            if fragment >= c.global.len() || sent.len() != chunk {
                return reason(format!(
                    "island rank {i}'s pseudo-gradient under way holds {} values of fragment \
                     {fragment}, where its chunk of the model's {} fragments holds {chunk}",
                    sent.len(),
                    c.global.len()
                ));
            }
        }
        let cut = |of: &dyn Fn(&OuterSnapshot) -> &[f32]| -> Vec<f32> {
            let v: Vec<f32> = chunks.iter().flat_map(|c| of(c).iter().copied()).collect();
            v[chunk_of(0..v.len(), (n, j))].to_vec()
        };
        let whole = |of: &dyn Fn(&OuterSnapshot) -> &Vec<Vec<f32>>, f: usize| -> Vec<f32> {
            cut(&|c| &of(c)[f])
        };
        // Checked above: every chunk holds the same fragment's sync under way, or none does.
        let pending = first.pending.as_ref().map(|(f, _)| {
            let sent = cut(&|c| {
                c.pending
                    .as_ref()
                    .map_or(&[][..], |(_, sent)| sent.as_slice())
            });
            (*f, sent)
        });
        let fragments = first.global.len();
        Ok(OuterSnapshot {
            steps: first.steps,
            synced_at: first.synced_at,
            syncs: first.syncs,
            island,
            chunk_of: j,
            island_size: n,
            global: (0..fragments).map(|f| whole(&|c| &c.global, f)).collect(),
            momentum: (0..fragments).map(|f| whole(&|c| &c.momentum, f)).collect(),
            pending,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(chunk_of: usize, size: usize, global: Vec<Vec<f32>>) -> OuterSnapshot {
        OuterSnapshot {
            steps: 40,
            synced_at: 40,
            syncs: 2,
            island: 0,
            chunk_of,
            island_size: size,
            momentum: global
                .iter()
                .map(|g| g.iter().map(|x| -x).collect())
                .collect(),
            global,
            pending: None,
        }
    }

    /// Note [A resume at another layout]: two fragments of 5 and 4 elements, chunked for
    /// islands of 2 (3+2 and 2+2), cut again for islands of 3 (2+2+1 and 2+2+0) and of 1.
    #[test]
    fn an_islands_chunks_are_cut_again_for_another_island_size() {
        let two = [
            snapshot(0, 2, vec![vec![0., 1., 2.], vec![5., 6.]]),
            snapshot(1, 2, vec![vec![3., 4.], vec![7., 8.]]),
        ];
        let cut: Vec<OuterSnapshot> = (0..3)
            .map(|j| OuterSnapshot::reshaped(&two, 1, (3, j)).unwrap())
            .collect();
        assert_eq!(cut[0].global, vec![vec![0., 1.], vec![5., 6.]]);
        assert_eq!(cut[1].global, vec![vec![2., 3.], vec![7., 8.]]);
        assert_eq!(cut[2].global, vec![vec![4.], vec![]]);
        assert_eq!(cut[2].momentum, vec![vec![-4.], vec![]]);
        assert_eq!(
            (cut[2].island, cut[2].chunk_of, cut[2].island_size),
            (1, 2, 3)
        );
        let one = OuterSnapshot::reshaped(&two, 0, (1, 0)).unwrap();
        assert_eq!(
            one.global,
            vec![vec![0., 1., 2., 3., 4.], vec![5., 6., 7., 8.]]
        );
        assert_eq!((one.steps, one.synced_at, one.syncs), (40, 40, 2));
    }

    /// Note [A resume at another layout]: island 0's pseudo-gradient under way (fragment 1
    /// of 3 + 2 values, chunked for islands of 2) is cut again with the rest.
    #[test]
    fn a_sync_under_way_is_cut_again_with_the_rest() {
        let mut two = [
            snapshot(0, 2, vec![vec![0., 1., 2.], vec![5., 6.]]),
            snapshot(1, 2, vec![vec![3., 4.], vec![7., 8.]]),
        ];
        two[0].pending = Some((1, vec![0.5, 0.25]));
        two[1].pending = Some((1, vec![0.125, 1.0]));
        let cut: Vec<OuterSnapshot> = (0..3)
            .map(|j| OuterSnapshot::reshaped(&two, 2, (3, j)).unwrap())
            .collect();
        assert_eq!(cut[0].pending, Some((1, vec![0.5, 0.25])));
        assert_eq!(cut[1].pending, Some((1, vec![0.125, 1.0])));
        assert_eq!(cut[2].pending, Some((1, vec![])));
        let one = OuterSnapshot::reshaped(&two, 0, (1, 0)).unwrap();
        assert_eq!(one.pending, Some((1, vec![0.5, 0.25, 0.125, 1.0])));
    }

    #[test]
    fn syncs_under_way_that_differ_or_chunks_out_of_order_are_named() {
        let mut two = [
            snapshot(0, 2, vec![vec![0., 1.]]),
            snapshot(1, 2, vec![vec![2., 3.]]),
        ];
        two[1].pending = Some((0, vec![0.5, 0.5]));
        let e = OuterSnapshot::reshaped(&two, 0, (1, 0))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("island rank 1's outer state has the sync of fragment 0 under way")
                && e.contains("island rank 0's no sync under way"),
            "{e}"
        );
        two[0].pending = Some((0, vec![0.5]));
        let e = OuterSnapshot::reshaped(&two, 0, (1, 0))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("island rank 0's pseudo-gradient under way holds 1 values of fragment 0")
                && e.contains("holds 2"),
            "{e}"
        );
        two.swap(0, 1);
        let e = OuterSnapshot::reshaped(&two, 0, (1, 0))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("island rank 0's outer state is not chunk 0"),
            "{e}"
        );
    }
}
