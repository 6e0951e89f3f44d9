//! A synthetic, MNIST-shaped dataset of any size, for benchmarks: 784 features in [0, 1),
//! 10 classes, each label given by a fixed random "teacher" network, so a student MLP can
//! learn it and two datasets made with different seeds are samples of the same task.

use crate::dataset::Dataset;

/// Features per sample (28x28, like MNIST).
pub const SYNTHETIC_DIM: usize = 784;
/// Number of classes.
pub const SYNTHETIC_CLASSES: usize = 10;
const TEACHER_HIDDEN: usize = 16;
/// The teacher's weights never change: only the features depend on the dataset's seed.
const TEACHER_SEED: u64 = 0x7068_616c_616e_7821; // "phalanx!"

/// `n` samples drawn with `seed`: features uniform in [0, 1), labels
/// `argmax(W2 · tanh(W1 · (x - 0.5)))` of a fixed teacher (784 → 16 → 10).
/// The same `(n, seed)` always gives the same dataset, on every machine.
///
/// ```
/// let a = phalanx_data::synthetic(50, 1);
/// assert_eq!((a.len(), a.dim(), a.classes()), (50, 784, 10));
/// assert_eq!(a, phalanx_data::synthetic(50, 1));
/// assert_ne!(a.features(), phalanx_data::synthetic(50, 2).features());
/// ```
pub fn synthetic(n: usize, seed: u64) -> Dataset {
    let (w1, w2) = teacher();
    let mut rng = SplitMix64(seed);
    let features: Vec<f32> = (0..n * SYNTHETIC_DIM).map(|_| rng.unit()).collect();
    let labels = features
        .chunks_exact(SYNTHETIC_DIM)
        .map(|x| {
            let hidden: Vec<f32> = w1
                .chunks_exact(SYNTHETIC_DIM)
                .map(|w| {
                    let pre: f32 = w.iter().zip(x).map(|(w, x)| w * (x - 0.5)).sum();
                    pre.tanh()
                })
                .collect();
            let logits = w2
                .chunks_exact(TEACHER_HIDDEN)
                .map(|w| w.iter().zip(&hidden).map(|(w, h)| w * h).sum::<f32>());
            argmax(logits) as i64
        })
        .collect();
    Dataset::new(
        format!("synthetic:{n}:{seed}"),
        features,
        labels,
        SYNTHETIC_DIM,
        SYNTHETIC_CLASSES,
    )
    .expect("synthetic data is consistent by construction")
}

/// The teacher's weights: `W1` (16 x 784) scaled so that the hidden pre-activations have a
/// standard deviation of about 1.5 (tanh is then neither linear nor saturated), and `W2`
/// (10 x 16) with orthonormal rows, so the 10 logits are uncorrelated with equal variance
/// and the classes come out roughly balanced.
fn teacher() -> (Vec<f32>, Vec<f32>) {
    let mut rng = SplitMix64(TEACHER_SEED);
    // Var(x - 0.5) = 1/12 and Var(w) = scale^2 / 3, summed over 784 inputs.
    let scale1 = 1.5 * (36.0 / SYNTHETIC_DIM as f32).sqrt();
    let w1 = (0..TEACHER_HIDDEN * SYNTHETIC_DIM)
        .map(|_| rng.symmetric() * scale1)
        .collect();
    let mut w2: Vec<f32> = (0..SYNTHETIC_CLASSES * TEACHER_HIDDEN)
        .map(|_| rng.symmetric())
        .collect();
    // Gram-Schmidt on the rows (10 random vectors in 16 dimensions are independent).
    for c in 0..SYNTHETIC_CLASSES {
        for prev in 0..c {
            let dot: f32 = (0..TEACHER_HIDDEN)
                .map(|k| w2[c * TEACHER_HIDDEN + k] * w2[prev * TEACHER_HIDDEN + k])
                .sum();
            for k in 0..TEACHER_HIDDEN {
                w2[c * TEACHER_HIDDEN + k] -= dot * w2[prev * TEACHER_HIDDEN + k];
            }
        }
        let row = &mut w2[c * TEACHER_HIDDEN..(c + 1) * TEACHER_HIDDEN];
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        row.iter_mut().for_each(|v| *v /= norm);
    }
    (w1, w2)
}

fn argmax(values: impl Iterator<Item = f32>) -> usize {
    values
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (i, v)| {
            if v > best.1 {
                (i, v)
            } else {
                best
            }
        })
        .0
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and identical on every platform.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 24 random bits (exactly representable in f32).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u32 << 24) as f32
    }

    /// Uniform in [-1, 1).
    fn symmetric(&mut self) -> f32 {
        2.0 * self.unit() - 1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_occurs_and_none_dominates() {
        let d = synthetic(5000, 0);
        let counts = d.label_counts();
        assert!(counts.iter().all(|&c| c > 100), "{counts:?}");
        assert!(counts.iter().all(|&c| c < 2000), "{counts:?}");
    }

    #[test]
    fn labels_depend_only_on_features() {
        // The teacher is fixed: the same features give the same label in any dataset.
        let a = synthetic(20, 3);
        let b = synthetic(40, 3);
        assert_eq!(a.labels(), &b.labels()[..20]);
        assert!(a.features().iter().all(|&v| (0.0..1.0).contains(&v)));
    }
}
