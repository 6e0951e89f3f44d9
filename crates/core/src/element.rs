//! The [`Element`] trait: what a collective needs to know about an element type.

use bytemuck::Pod;
use half::{bf16, f16};

use crate::{DType, ReduceOp};

/// A plain-old-data element that collectives can move and reduce.
///
/// Reductions of 16-bit floats accumulate in f32 per pair and round once, which keeps the
/// canonical order (see `phalanx-collectives`) the only source of rounding differences.
pub trait Element: Pod + Send + Sync + PartialEq + std::fmt::Debug + 'static {
    /// The dtype tag sent in fingerprints.
    const DTYPE: DType;
    /// Combines two elements with `op`. `Avg` combines like `Sum`; the division comes last.
    fn reduce(op: ReduceOp, a: Self, b: Self) -> Self;
    /// Divides by the world size (the last step of `Avg`).
    fn div_world(self, world_size: usize) -> Self;
    /// Converts from f64 (tests and benchmarks fill buffers with it).
    fn from_f64(v: f64) -> Self;
    /// Converts to f64 (tests compare through it).
    fn to_f64(self) -> f64;
}

macro_rules! float_element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            #[inline]
            fn reduce(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => a + b,
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Product => a * b,
                    // Refused by the process group for float dtypes; defined on the bits so
                    // that the kernels stay total.
                    ReduceOp::BAnd => <$t>::from_bits(a.to_bits() & b.to_bits()),
                    ReduceOp::BOr => <$t>::from_bits(a.to_bits() | b.to_bits()),
                    ReduceOp::BXor => <$t>::from_bits(a.to_bits() ^ b.to_bits()),
                }
            }
            #[inline]
            fn div_world(self, world_size: usize) -> Self {
                self / world_size as $t
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}
float_element!(f32, DType::F32);
float_element!(f64, DType::F64);

macro_rules! int_element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            #[inline]
            fn reduce(op: ReduceOp, a: Self, b: Self) -> Self {
                // Wrapping, as C and torch integer tensors do: overflow is not an error here.
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => a.wrapping_add(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Product => a.wrapping_mul(b),
                    ReduceOp::BAnd => a & b,
                    ReduceOp::BOr => a | b,
                    ReduceOp::BXor => a ^ b,
                }
            }
            #[inline]
            fn div_world(self, world_size: usize) -> Self {
                self / world_size as $t
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}
int_element!(i32, DType::I32);
int_element!(i64, DType::I64);

impl Element for u8 {
    const DTYPE: DType = DType::U8;
    #[inline]
    fn reduce(op: ReduceOp, a: Self, b: Self) -> Self {
        match op {
            ReduceOp::Sum | ReduceOp::Avg => a.wrapping_add(b),
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
            ReduceOp::Product => a.wrapping_mul(b),
            ReduceOp::BAnd => a & b,
            ReduceOp::BOr => a | b,
            ReduceOp::BXor => a ^ b,
        }
    }
    fn div_world(self, world_size: usize) -> Self {
        (self as usize / world_size) as u8
    }
    fn from_f64(v: f64) -> Self {
        v as u8
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

macro_rules! half_element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            #[inline]
            fn reduce(op: ReduceOp, a: Self, b: Self) -> Self {
                if op.is_bitwise() {
                    // As for f32: refused by the process group, defined on the bits.
                    let f = |x: u16, y: u16| match op {
                        ReduceOp::BAnd => x & y,
                        ReduceOp::BOr => x | y,
                        _ => x ^ y,
                    };
                    return <$t>::from_bits(f(a.to_bits(), b.to_bits()));
                }
                let (x, y) = (a.to_f32(), b.to_f32());
                <$t>::from_f32(f32::reduce(op, x, y))
            }
            #[inline]
            fn div_world(self, world_size: usize) -> Self {
                <$t>::from_f32(self.to_f32() / world_size as f32)
            }
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
        }
    };
}
half_element!(bf16, DType::BF16);
half_element!(f16, DType::F16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduce_ops() {
        assert_eq!(i32::reduce(ReduceOp::Sum, i32::MAX, 1), i32::MIN);
        assert_eq!(f64::reduce(ReduceOp::Product, 2.0, 4.0), 8.0);
        assert_eq!(
            bf16::reduce(ReduceOp::Sum, bf16::ONE, bf16::ONE).to_f32(),
            2.0
        );
        assert_eq!(f32::reduce(ReduceOp::Avg, 3.0, 5.0).div_world(2), 4.0);
        assert_eq!(i64::reduce(ReduceOp::Min, -3, 5), -3);
    }
}
