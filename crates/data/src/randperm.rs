//! `torch.randperm` on the CPU, bit for bit.
//!
//! Note [randperm paths]: PyTorch's `randperm_cpu` (aten/src/ATen/native/TensorFactories.cpp)
//! has two algorithms, chosen by `n < u32::MAX / 20` (= 214,748,364):
//! - small n: start from `0..n`, then for `i in 0..n-1` swap `r[i]` with `r[i + z]`, where
//!   `z = random() % (n - i)` and `random()` is one 32-bit MT19937 draw;
//! - large n: the "inside-out" Fisher-Yates, `z = random64() % (i + 1); r[i] = r[z]; r[z] = i`,
//!   where `random64()` is two draws, the first one in the high half (the modulo bias of a
//!   32-bit draw would become visible at that size).
//!
//! The generator is the reference MT19937 seeded with the low 32 bits of the seed
//! (`CPUGeneratorImpl::set_current_seed` → `mt19937(seed)` → `init_with_uint32`).

use rand_mt::Mt;

/// Below this length torch uses the 32-bit swap shuffle; from it on, the 64-bit inside-out one.
pub const RANDPERM_SMALL_LIMIT: usize = (u32::MAX / 20) as usize;

/// A torch CPU generator after `manual_seed(seed)`: MT19937 seeded with the low 32 bits.
pub(crate) fn torch_generator(seed: u64) -> Mt {
    Mt::new(seed as u32)
}

/// `torch.randperm(n, generator=g)` after `g.manual_seed(seed)`, on the CPU.
///
/// ```
/// use phalanx_data::randperm;
/// assert_eq!(randperm(10, 0), [4, 1, 7, 5, 3, 9, 0, 8, 6, 2]);
/// ```
pub fn randperm(n: usize, seed: u64) -> Vec<usize> {
    let mut g = torch_generator(seed);
    if n < RANDPERM_SMALL_LIMIT {
        let mut r: Vec<usize> = (0..n).collect();
        for i in 0..n.saturating_sub(1) {
            let z = g.next_u32() as usize % (n - i);
            r.swap(i, i + z);
        }
        r
    } else {
        let mut r = vec![0usize; n];
        for i in 0..n {
            let hi = u64::from(g.next_u32());
            let lo = u64::from(g.next_u32());
            let z = (((hi << 32) | lo) % (i as u64 + 1)) as usize;
            r[i] = r[z];
            r[z] = i;
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_mt19937_output() {
        // The first output of the reference mt19937 seeded with 5489 (C++ std::mt19937's check
        // value for the 10000th draw is 4123659995).
        let mut g = torch_generator(5489);
        let mut last = 0;
        for _ in 0..10000 {
            last = g.next_u32();
        }
        assert_eq!(last, 4_123_659_995);
    }

    #[test]
    fn torch_check_value() {
        assert_eq!(randperm(10, 0), [4, 1, 7, 5, 3, 9, 0, 8, 6, 2]);
        // Only the low 32 bits of the seed reach the generator.
        assert_eq!(randperm(10, 1 << 32), randperm(10, 0));
    }

    #[test]
    fn degenerate_lengths() {
        assert!(randperm(0, 3).is_empty());
        assert_eq!(randperm(1, 3), [0]);
    }

    #[test]
    fn is_a_permutation() {
        let mut r = randperm(1000, 42);
        r.sort_unstable();
        assert!(r.iter().enumerate().all(|(i, &v)| i == v));
    }
}
