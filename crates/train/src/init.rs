//! Deterministic parameter initialisation from a seed, independent of Burn's process-global RNG
//! (Burn's `Backend::seed` is one per process, shared by every thread, so two threads or two
//! initialisation orders would draw different values).

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny, well-mixed generator, enough for weight init.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream for one tensor: `seed` and `stream` (the parameter's position) mixed so that
    /// nearby seeds and streams give unrelated sequences.
    pub(crate) fn new(seed: u64, stream: u64) -> Self {
        let mut g = SplitMix64(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        g.next_u64();
        g
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 24 random bits (exact in f32).
    pub(crate) fn next_unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }
}

/// `n` values uniform in `[-bound, bound)`: PyTorch's `nn.Linear` default, where
/// `bound = 1/sqrt(fan_in)` for both weight and bias.
pub(crate) fn uniform(n: usize, bound: f32, rng: &mut SplitMix64) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.next_unit_f32() * 2.0 - 1.0) * bound)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_same_values() {
        let a = uniform(100, 0.5, &mut SplitMix64::new(7, 1));
        let b = uniform(100, 0.5, &mut SplitMix64::new(7, 1));
        assert_eq!(a, b);
        assert_ne!(a, uniform(100, 0.5, &mut SplitMix64::new(7, 2)));
        assert_ne!(a, uniform(100, 0.5, &mut SplitMix64::new(8, 1)));
    }

    #[test]
    fn values_stay_within_bound_and_spread() {
        let v = uniform(10_000, 0.25, &mut SplitMix64::new(0, 0));
        assert!(v.iter().all(|x| (-0.25..0.25).contains(x)));
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!(v.iter().any(|&x| x > 0.2) && v.iter().any(|&x| x < -0.2));
    }
}
