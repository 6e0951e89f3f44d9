//! [`OuterDType`]: how an outer sync carries its pseudo-gradients across islands (`--outer-dtype`),
//! and the codecs that pack a run of `f32` into those bytes and back. Pure: no group, no state.
//!
//! Note [Outer dtype error]
//! A quantized dtype carries its scales: the values are cut into blocks, and each block is sent
//! as one `f32` scale and a small code per value, rounded to the nearest (no stochastic
//! rounding, so every rank decodes the same bytes to the same floats, and the sync stays
//! bitwise equal on every rank). For a block whose largest magnitude is `a`:
//! - `int8`: blocks of [`INT8_BLOCK`], scale `s = a / 127`, code `round(x / s)`; each value is
//!   off by at most `s / 2 = a / 254`.
//! - `fp4`: blocks of [`FP4_BLOCK`], scale `s = a / 6`, code the nearest of e2m1's magnitudes
//!   `0, 0.5, 1, 1.5, 2, 3, 4, 6` (OCP's FP4) with a sign; the gaps are at most 2, so each value
//!   is off by at most `s = a / 6`, by at most `s / 4` below `2s`, and by at most a quarter of
//!   itself above.
//! - `bf16`: round to nearest even, off by at most `|x| / 256`.
//!
//! The mean across `n` islands decodes every island's part, sums in island order in `f32` and
//! divides by `n`, then encodes the mean again for the way back: the error of the mean is at
//! most the mean of the islands' errors plus one more rounding of the mean (tested below).
//! Small blocks bound each value's error by its neighbours' magnitude, not the whole tensor's;
//! the pseudo-gradient (global minus local parameters) is small next to the parameters, so the
//! error lands on the update, not on the weights. No error feedback is kept: DiLoCo's and
//! Streaming DiLoCo's papers find the outer step tolerant of 4-bit pseudo-gradients without it.

use std::fmt;
use std::str::FromStr;

/// Values per `int8` block (one `f32` scale each: 1.016 bytes per value, 3.94x less than `f32`).
pub const INT8_BLOCK: usize = 256;
/// Values per `fp4` block (one `f32` scale each: 0.5625 bytes per value, 7.1x less than `f32`).
pub const FP4_BLOCK: usize = 64;

/// e2m1's magnitudes, in code order (codes 0 to 7; bit 3 is the sign).
const FP4_MAGNITUDES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// The dtype of an outer sync's pseudo-gradients on the wire between islands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OuterDType {
    /// Full precision: an all-reduce of `f32`.
    #[default]
    F32,
    /// bfloat16, rounded to nearest even.
    Bf16,
    /// 8-bit integers with one `f32` scale per block of [`INT8_BLOCK`].
    Int8,
    /// 4-bit e2m1 floats with one `f32` scale per block of [`FP4_BLOCK`].
    Fp4,
}

impl OuterDType {
    /// Every dtype, as `--outer-dtype` spells it.
    pub const ALL: [OuterDType; 4] = [
        OuterDType::F32,
        OuterDType::Bf16,
        OuterDType::Int8,
        OuterDType::Fp4,
    ];

    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            OuterDType::F32 => "f32",
            OuterDType::Bf16 => "bf16",
            OuterDType::Int8 => "int8",
            OuterDType::Fp4 => "fp4",
        }
    }

    /// Bytes that `len` values take on the wire.
    pub fn encoded_len(self, len: usize) -> usize {
        match self {
            OuterDType::F32 => 4 * len,
            OuterDType::Bf16 => 2 * len,
            OuterDType::Int8 => len + 4 * len.div_ceil(INT8_BLOCK),
            OuterDType::Fp4 => len.div_ceil(2) + 4 * len.div_ceil(FP4_BLOCK),
        }
    }

    /// Appends `values`, encoded, to `out` ([`encoded_len`](Self::encoded_len) bytes).
    pub fn encode(self, values: &[f32], out: &mut Vec<u8>) {
        match self {
            OuterDType::F32 => values.iter().for_each(|v| out.extend(v.to_le_bytes())),
            OuterDType::Bf16 => values
                .iter()
                .for_each(|v| out.extend(half::bf16::from_f32(*v).to_bits().to_le_bytes())),
            OuterDType::Int8 => {
                for block in values.chunks(INT8_BLOCK) {
                    let scale = absmax(block) / 127.0;
                    out.extend(scale.to_le_bytes());
                    let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
                    out.extend(
                        block
                            .iter()
                            .map(|v| (v * inv).round().clamp(-127.0, 127.0) as i8 as u8),
                    );
                }
            }
            OuterDType::Fp4 => {
                for block in values.chunks(FP4_BLOCK) {
                    let scale = absmax(block) / 6.0;
                    out.extend(scale.to_le_bytes());
                    let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
                    for pair in block.chunks(2) {
                        let lo = fp4_code(pair[0] * inv);
                        let hi = pair.get(1).map_or(0, |v| fp4_code(v * inv));
                        out.push(lo | (hi << 4));
                    }
                }
            }
        }
    }

    /// Decodes `len` values from `bytes` (as [`encode`](Self::encode) wrote them) and hands
    /// each to `f` with its index: the caller sums or stores without a temporary.
    pub fn decode(self, bytes: &[u8], len: usize, mut f: impl FnMut(usize, f32)) {
        debug_assert_eq!(bytes.len(), self.encoded_len(len));
        match self {
            OuterDType::F32 => bytes
                .chunks_exact(4)
                .enumerate()
                .for_each(|(i, b)| f(i, f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            OuterDType::Bf16 => bytes.chunks_exact(2).enumerate().for_each(|(i, b)| {
                f(
                    i,
                    half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
                )
            }),
            OuterDType::Int8 => {
                let mut at = 0;
                for (k, n) in blocks(len, INT8_BLOCK) {
                    let scale = scale_at(bytes, at);
                    let codes = &bytes[at + 4..at + 4 + n];
                    for (j, &c) in codes.iter().enumerate() {
                        f(k + j, c as i8 as f32 * scale);
                    }
                    at += 4 + n;
                }
            }
            OuterDType::Fp4 => {
                let mut at = 0;
                for (k, n) in blocks(len, FP4_BLOCK) {
                    let scale = scale_at(bytes, at);
                    let codes = &bytes[at + 4..at + 4 + n.div_ceil(2)];
                    for j in 0..n {
                        let code = (codes[j / 2] >> (4 * (j % 2))) & 0xF;
                        f(k + j, fp4_value(code) * scale);
                    }
                    at += 4 + n.div_ceil(2);
                }
            }
        }
    }
}

impl fmt::Display for OuterDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OuterDType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| format!("unknown outer dtype `{s}`: use f32, bf16, int8 or fp4"))
    }
}

/// The largest magnitude of `block` (0 for an empty one; NaN passes through as NaN).
fn absmax(block: &[f32]) -> f32 {
    block.iter().fold(0.0f32, |m, v| {
        if v.is_nan() || m.is_nan() {
            f32::NAN
        } else {
            m.max(v.abs())
        }
    })
}

/// The blocks of `len` values: each one's first index and length.
fn blocks(len: usize, block: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len)
        .step_by(block)
        .map(move |k| (k, block.min(len - k)))
}

fn scale_at(bytes: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The e2m1 code nearest `x` (already divided by its block's scale, so within `[-6, 6]`).
fn fp4_code(x: f32) -> u8 {
    let m = x.abs();
    let mut best = 0;
    for (code, &v) in FP4_MAGNITUDES.iter().enumerate() {
        // Ties go to the smaller magnitude: the comparison is strict.
        if (m - v).abs() < (m - FP4_MAGNITUDES[best]).abs() {
            best = code;
        }
    }
    let sign = if x.is_sign_negative() && best != 0 {
        8
    } else {
        0
    };
    best as u8 | sign
}

fn fp4_value(code: u8) -> f32 {
    let m = FP4_MAGNITUDES[(code & 7) as usize];
    if code & 8 != 0 {
        -m
    } else {
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values with a spread of magnitudes, as a pseudo-gradient has.
    fn sample(len: usize) -> Vec<f32> {
        let mut z = 0x9E37_79B9_7F4A_7C15u64;
        (0..len)
            .map(|i| {
                z = z
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (z >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                u * if i % 7 == 0 { 10.0 } else { 0.01 }
            })
            .collect()
    }

    fn round_trip(dtype: OuterDType, values: &[f32]) -> Vec<f32> {
        let mut bytes = Vec::new();
        dtype.encode(values, &mut bytes);
        assert_eq!(bytes.len(), dtype.encoded_len(values.len()), "{dtype}");
        let mut back = vec![f32::NAN; values.len()];
        dtype.decode(&bytes, values.len(), |i, v| back[i] = v);
        back
    }

    /// Each value is within Note [Outer dtype error]'s bound of its block's largest magnitude.
    fn assert_within_bound(dtype: OuterDType, values: &[f32], back: &[f32]) {
        let block = match dtype {
            OuterDType::Int8 => INT8_BLOCK,
            OuterDType::Fp4 => FP4_BLOCK,
            _ => values.len().max(1),
        };
        for (k, (vs, bs)) in values.chunks(block).zip(back.chunks(block)).enumerate() {
            let a = absmax(vs);
            for (j, (v, b)) in vs.iter().zip(bs).enumerate() {
                let bound = match dtype {
                    OuterDType::F32 => 0.0,
                    OuterDType::Bf16 => v.abs() / 256.0,
                    OuterDType::Int8 => a / 254.0 * 1.0001,
                    OuterDType::Fp4 => (a / 6.0).min(v.abs() / 4.0 + a / 12.0) * 1.0001,
                };
                assert!(
                    (v - b).abs() <= bound,
                    "{dtype}: value {} of block {k}: {v} came back as {b} (bound {bound})",
                    j
                );
            }
        }
    }

    #[test]
    fn each_dtype_round_trips_within_its_bound() {
        // Lengths with partial blocks and an odd count (fp4 packs two values per byte).
        for len in [0, 1, 63, 64, 257, 1001] {
            let values = sample(len);
            for dtype in OuterDType::ALL {
                let back = round_trip(dtype, &values);
                assert_within_bound(dtype, &values, &back);
            }
        }
    }

    #[test]
    fn f32_is_exact_and_quantized_dtypes_are_smaller() {
        let values = sample(4096);
        assert_eq!(round_trip(OuterDType::F32, &values), values);
        let f32_len = OuterDType::F32.encoded_len(4096) as f64;
        assert!(f32_len / OuterDType::Int8.encoded_len(4096) as f64 > 3.9);
        assert!(f32_len / OuterDType::Fp4.encoded_len(4096) as f64 > 7.0);
    }

    #[test]
    fn zeros_and_exact_codes_come_back_exactly() {
        let zeros = vec![0.0; 100];
        let codes: Vec<f32> = FP4_MAGNITUDES.iter().flat_map(|&m| [m, -m]).collect();
        for dtype in OuterDType::ALL {
            assert_eq!(round_trip(dtype, &zeros), zeros, "{dtype}");
        }
        assert_eq!(round_trip(OuterDType::Fp4, &codes), codes);
    }

    #[test]
    fn names_parse_back_and_unknown_ones_are_named() {
        for dtype in OuterDType::ALL {
            assert_eq!(dtype.name().parse::<OuterDType>().unwrap(), dtype);
        }
        let e = "int4".parse::<OuterDType>().unwrap_err();
        assert!(e.contains("`int4`") && e.contains("fp4"), "{e}");
    }
}
