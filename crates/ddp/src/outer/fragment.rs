//! [`Fragment`]: one piece of the model's outer state on this rank (Note [Streaming fragments]
//! in the parent): where it lies, this rank's chunk of its global parameters and outer
//! momentum, and the outer optimizer's step on it.

use std::ops::Range;

use super::options::{OuterMode, OuterOptions};

/// One fragment of the model: a range of its float tensors laid end to end, of which this rank
/// holds chunk `j` of `N` (its island rank of its island's size).
#[derive(Debug, Clone)]
pub(super) struct Fragment {
    /// The fragment's elements, in the model's float tensors laid end to end.
    pub(super) range: Range<usize>,
    /// This rank's chunk of them (same coordinates).
    pub(super) chunk: Range<usize>,
    /// Each tensor's part of the chunk (relative to it) and whether the outer optimizer steps
    /// it (trainable) or only averages it (a buffer).
    parts: Vec<(Range<usize>, bool)>,
    /// The chunk of the global parameters and of the outer momentum.
    pub(super) global: Vec<f32>,
    momentum: Vec<f32>,
    /// Whether the island's parameters of this fragment may differ from the global ones
    /// (an inner step ran since its last sync, or that sync kept some local progress).
    pub(super) dirty: bool,
}

/// Chunk `j` of `n` of `range`: `n` runs of `range.len().div_ceil(n)` elements, the last ones
/// shorter or empty (every rank pads its chunk to that length for the island's all-gather).
pub(super) fn chunk_of(range: Range<usize>, (n, j): (usize, usize)) -> Range<usize> {
    let per = range.len().div_ceil(n);
    (range.start + j * per).min(range.end)..(range.start + (j + 1) * per).min(range.end)
}

impl Fragment {
    /// The model cut into `count` fragments of (nearly) equal size, in tensor order (so a
    /// fragment is a run of layers, as the paper's are), each cut into `n` chunks of which
    /// this rank holds chunk `j`. `lens` and `trainable` are the float tensors'.
    pub(super) fn layout(
        lens: &[usize],
        trainable: &[bool],
        count: usize,
        (n, j): (usize, usize),
    ) -> Vec<Fragment> {
        let total: usize = lens.iter().sum();
        (0..count)
            .map(|f| {
                let range = f * total / count..(f + 1) * total / count;
                let chunk = chunk_of(range.clone(), (n, j));
                let mut parts = Vec::new();
                let mut at = 0;
                for (len, trainable) in lens.iter().zip(trainable) {
                    let (lo, hi) = (at.max(chunk.start), (at + len).min(chunk.end));
                    if lo < hi {
                        parts.push((lo - chunk.start..hi - chunk.start, *trainable));
                    }
                    at += len;
                }
                Fragment {
                    range,
                    chunk,
                    parts,
                    global: Vec::new(),
                    momentum: Vec::new(),
                    dirty: false,
                }
            })
            .collect()
    }

    /// The length every rank's chunk is padded to for the all-gather over the island.
    pub(super) fn per(&self, n: usize) -> usize {
        self.range.len().div_ceil(n)
    }

    /// Takes `global` as the fragment's first global parameters, with no momentum.
    pub(super) fn reset(&mut self, global: Vec<f32>) {
        self.momentum = vec![0.0; global.len()];
        self.global = global;
        self.dirty = false;
    }

    /// The chunk's global parameters and momentum, to put back with
    /// [`restore`](Self::restore) if the sync that steps them does not complete.
    pub(super) fn snapshot(&self) -> (Vec<f32>, Vec<f32>) {
        (self.global.clone(), self.momentum.clone())
    }

    pub(super) fn restore(&mut self, (global, momentum): (Vec<f32>, Vec<f32>)) {
        (self.global, self.momentum) = (global, momentum);
    }

    /// The outer optimizer's step on this chunk with the islands' mean pseudo-gradient
    /// `delta`: SGD with Nesterov momentum (DiLoCo), or `θ -= Δ` (local SGD, which is the same
    /// as averaging the islands' parameters), and buffers averaged whatever the mode.
    pub(super) fn outer_step(&mut self, delta: &[f32], options: &OuterOptions) {
        let (lr, mu) = (options.lr, options.momentum);
        let nesterov = options.mode != OuterMode::LocalSgd;
        for (range, stepped) in &self.parts {
            for i in range.clone() {
                let d = delta[i];
                if *stepped && nesterov {
                    // torch.optim.SGD(lr, momentum, nesterov=True): b = mu b + d, then
                    // d + mu b.
                    let b = mu * self.momentum[i] + d;
                    self.momentum[i] = b;
                    self.global[i] -= lr * (d + mu * b);
                } else {
                    self.global[i] -= d;
                }
            }
        }
    }
}
