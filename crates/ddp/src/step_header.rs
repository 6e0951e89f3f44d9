//! The step header: what every rank must know about a synchronising step beyond the gradients
//! themselves, agreed on in the same collective as the first bucket.
//!
//! Note [Step header]
//! Each rank contributes, per trainable parameter, 1.0 when its backward produced a gradient
//! for it (0.0 when the parameter was unused in this step, by this rank's control flow), and,
//! per rank, 1.0 in its own slot when it still has data (0.0 for a rank that has joined, see
//! Note [Uneven inputs] in `ddp.rs`). The header rides at the end of the first bucket when the
//! communication hook is the plain average (`CommHook::is_plain_average`), so it costs no extra
//! collective; behind any other hook (which may compress or transform its buffer) it is its own
//! small allreduce, launched before the first bucket. Either way every rank reads the same
//! reduced header, and a slot is set after the reduction exactly when some rank set it (a sum or
//! an average of zeros and ones is positive exactly when one of them was one). So:
//! - a parameter no rank used gets no gradient at all: the optimizer leaves it alone, momentum
//!   and weight decay included (PyTorch: `find_unused_parameters=True`);
//! - a parameter some ranks used is averaged with the others' zeros, as in PyTorch;
//! - the gradients of a step in which only some ranks had data are averaged over those ranks
//!   only, and the lowest of them is the authority for the buffers.
//!
//! No flag is needed: the header costs `params + world` floats per step.

/// The header a rank contributes: its used flags and its slot of the active vector.
pub(crate) fn local_header(used: &[bool], rank: usize, world: usize, active: bool) -> Vec<f32> {
    let mut header = Vec::with_capacity(used.len() + world);
    header.extend(used.iter().map(|&u| f32::from(u8::from(u))));
    header.extend((0..world).map(|r| f32::from(u8::from(active && r == rank))));
    header
}

/// What the ranks agreed on for one step, read from the reduced header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Agreement {
    used: Vec<bool>,
    active: Vec<bool>,
}

impl Agreement {
    /// Reads a reduced header of `params` used flags followed by `world` active slots.
    pub(crate) fn from_reduced(header: &[f32], params: usize) -> Self {
        let (used, active) = header.split_at(params);
        Agreement {
            used: used.iter().map(|&v| v > 0.0).collect(),
            active: active.iter().map(|&v| v > 0.0).collect(),
        }
    }

    /// Whether some rank produced a gradient for trainable parameter `p`.
    pub(crate) fn is_used(&self, p: usize) -> bool {
        self.used[p]
    }

    /// Whether `rank` had data in this step.
    pub(crate) fn is_active(&self, rank: usize) -> bool {
        self.active[rank]
    }

    /// How many ranks had data in this step.
    pub(crate) fn active_ranks(&self) -> usize {
        self.active.iter().filter(|&&a| a).count()
    }

    /// The rank whose buffers every rank takes: the lowest rank that had data.
    pub(crate) fn authority(&self) -> Option<usize> {
        self.active.iter().position(|&a| a)
    }

    /// The factor that turns an average over all ranks into one over the ranks that had data;
    /// `None` when every rank had data (or none had).
    pub(crate) fn rescale(&self) -> Option<f32> {
        let active = self.active_ranks();
        (active > 0 && active < self.active.len()).then(|| self.active.len() as f32 / active as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The element-wise average, as the allreduce computes it.
    fn average(headers: &[Vec<f32>]) -> Vec<f32> {
        let n = headers.len() as f32;
        (0..headers[0].len())
            .map(|i| headers.iter().map(|h| h[i]).sum::<f32>() / n)
            .collect()
    }

    #[test]
    fn used_anywhere_counts_and_unused_everywhere_does_not() {
        let a = local_header(&[true, false, false], 0, 3, true);
        let b = local_header(&[true, true, false], 1, 3, true);
        let c = local_header(&[true, false, false], 2, 3, true);
        let agreed = Agreement::from_reduced(&average(&[a, b, c]), 3);
        assert_eq!(
            (0..3).map(|p| agreed.is_used(p)).collect::<Vec<_>>(),
            [true, true, false]
        );
        assert_eq!(agreed.active_ranks(), 3);
        assert_eq!(agreed.rescale(), None);
        assert_eq!(agreed.authority(), Some(0));
    }

    #[test]
    fn joined_ranks_leave_the_average_and_the_authority() {
        let joined = local_header(&[false, false], 0, 4, false);
        let others: Vec<Vec<f32>> = (1..4)
            .map(|r| local_header(&[true, true], r, 4, r != 2))
            .collect();
        let mut all = vec![joined];
        all.extend(others);
        let agreed = Agreement::from_reduced(&average(&all), 2);
        assert_eq!(agreed.active_ranks(), 2);
        assert_eq!(agreed.authority(), Some(1));
        assert_eq!(agreed.rescale(), Some(2.0));
    }

    #[test]
    fn nobody_active_means_done() {
        let h: Vec<Vec<f32>> = (0..2)
            .map(|r| local_header(&[false], r, 2, false))
            .collect();
        let agreed = Agreement::from_reduced(&average(&h), 1);
        assert_eq!(agreed.active_ranks(), 0);
        assert_eq!(agreed.authority(), None);
        assert_eq!(agreed.rescale(), None);
    }
}
