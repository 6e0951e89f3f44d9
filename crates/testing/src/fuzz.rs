//! Deterministic, bounded fuzzing for `cargo test`: seeded random and mutated inputs fed to a
//! decoder, and an allocator that remembers the largest single allocation (a decoder must
//! bound every length before it allocates).
//!
//! Coverage-guided fuzzing (`fuzz/`, cargo-fuzz) explores deeper; these run on every `cargo
//! test`, on stable, in seconds, and replay exactly.
//!
//! ```
//! use phalanx_testing::fuzz::{fuzz, Rng};
//! let seeds = vec![b"4K".to_vec(), b"1M".to_vec()];
//! let n = fuzz("doc", 7, &seeds, 1000, 64, |input| {
//!     let _ = std::str::from_utf8(input).map(|s| s.trim().len());
//! });
//! assert_eq!(n, 1000);
//! assert!(Rng::new(1).below(10) < 10);
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

/// SplitMix64: tiny, fast, and the same sequence everywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator started at `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }

    /// A random element of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Byte values that often hit edge cases in length and code fields.
const INTERESTING: [u8; 8] = [0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF, b'0', b'9'];

/// Applies one to four random mutations to `input`: bit flips, byte overwrites with random or
/// boundary values, insertions, deletions, duplication of a slice, truncation, or a 32/64-bit
/// boundary value written at a random offset (oversized lengths). Keeps it at most `max_len`.
pub fn mutate(rng: &mut Rng, input: &mut Vec<u8>, max_len: usize) {
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = rng.next_u64() as u8;
            }
            2 if len > 0 => {
                let i = rng.below(len);
                input[i] = *rng.pick(&INTERESTING);
            }
            3 => {
                let i = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let extra = rng.bytes(n);
                input.splice(i..i, extra);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(16));
                input.drain(i..i + n);
            }
            5 if len > 0 => {
                input.truncate(rng.below(len));
            }
            6 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(32));
                let copy = input[i..i + n].to_vec();
                let at = rng.below(len + 1);
                input.splice(at..at, copy);
            }
            7 if len >= 4 => {
                let i = rng.below(len - 3);
                let v: u32 = *rng.pick(&[u32::MAX, u32::MAX / 2 + 1, 0x7FFF_FFFF, 0x1000_0000, 0]);
                input[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
            8 if len >= 8 => {
                let i = rng.below(len - 7);
                let v: u64 = *rng.pick(&[u64::MAX, 1 << 63, 1 << 32, 0]);
                input[i..i + 8].copy_from_slice(&v.to_le_bytes());
            }
            _ => input.push(rng.next_u64() as u8),
        }
    }
    input.truncate(max_len);
}

/// Feeds `cases` inputs to `f`: one in eight is random bytes of random length up to `max_len`,
/// the others are a random seed with stacked mutations (each seed is also tried as is). A
/// panic in `f` fails with the case number and the input in hex, so it can be replayed.
/// Returns the number of inputs tried.
pub fn fuzz(
    name: &str,
    seed: u64,
    seeds: &[Vec<u8>],
    cases: usize,
    max_len: usize,
    mut f: impl FnMut(&[u8]),
) -> usize {
    let mut rng = Rng::new(seed);
    let start = Instant::now();
    let mut input = Vec::with_capacity(max_len);
    for case in 0..cases {
        input.clear();
        if case < seeds.len() {
            input.extend_from_slice(&seeds[case]);
        } else if seeds.is_empty() || rng.one_in(8) {
            let n = rng.below(max_len + 1);
            input.extend(rng.bytes(n));
        } else {
            let i = rng.below(seeds.len());
            input.extend_from_slice(&seeds[i]);
            mutate(&mut rng, &mut input, max_len);
            // Sometimes mutate the mutant again: deeper changes, still mostly well-formed.
            while rng.one_in(3) {
                mutate(&mut rng, &mut input, max_len);
            }
        }
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(&input))) {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!(
                "fuzz {name}: case {case} (seed {seed}) panicked: {msg}\ninput ({} bytes): {}",
                input.len(),
                phalanx_core::hex::encode(&input)
            );
        }
    }
    eprintln!(
        "fuzz {name}: {cases} inputs in {:.2} s",
        start.elapsed().as_secs_f64()
    );
    cases
}

/// A global allocator that passes through to [`System`] and records, per thread, the largest
/// single allocation, so a fuzz test can assert that no input made a decoder allocate a huge
/// buffer from an announced length (other tests' threads, running at the same time, do not
/// count). Install with `#[global_allocator]` in the test binary.
#[derive(Debug, Default)]
pub struct TrackingAlloc;

thread_local! {
    // `const` and `Cell`: no lazy initialisation, so no allocation from inside the allocator.
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // During thread teardown the slot may be gone; such allocations are not the decoder's.
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

impl TrackingAlloc {
    /// A new tracker.
    pub const fn new() -> TrackingAlloc {
        TrackingAlloc
    }

    /// The largest allocation (bytes) made by this thread since its last [`TrackingAlloc::reset`].
    pub fn largest(&self) -> usize {
        LARGEST.with(Cell::get)
    }

    /// Forgets this thread's largest allocation so far.
    pub fn reset(&self) {
        LARGEST.with(|l| l.set(0));
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; only a counter is added.
unsafe impl GlobalAlloc for TrackingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_bounded() {
        let seeds = vec![vec![1u8, 2, 3, 4, 5, 6, 7, 8, 9]];
        let mut a = Vec::new();
        let mut b = Vec::new();
        fuzz("a", 3, &seeds, 500, 40, |i| a.push(i.to_vec()));
        fuzz("b", 3, &seeds, 500, 40, |i| b.push(i.to_vec()));
        assert_eq!(a, b);
        assert!(a.iter().all(|i| i.len() <= 40));
        assert_eq!(a[0], seeds[0]);
        // Mutants differ from the seed, and there is variety.
        let distinct: std::collections::HashSet<_> = a.iter().collect();
        assert!(distinct.len() > 400, "{}", distinct.len());
    }

    #[test]
    fn a_panic_names_the_case() {
        let r = catch_unwind(|| fuzz("p", 1, &[], 100, 8, |i| assert!(i.len() < 4)));
        let msg = r.unwrap_err().downcast::<String>().unwrap();
        assert!(
            msg.contains("fuzz p: case") && msg.contains("input"),
            "{msg}"
        );
    }
}
