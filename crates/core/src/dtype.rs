//! Element types that travel through collectives.

use std::{fmt, str::FromStr};

use crate::Error;

/// The element type of a buffer handed to a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DType {
    /// IEEE 754 single precision.
    F32 = 0,
    /// IEEE 754 double precision.
    F64 = 1,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    BF16 = 2,
    /// IEEE 754 half precision.
    F16 = 3,
    /// Signed 32-bit integer.
    I32 = 4,
    /// Signed 64-bit integer.
    I64 = 5,
    /// Raw bytes (send/recv, broadcast of opaque data); not reducible.
    U8 = 6,
}

impl DType {
    /// Every dtype, in wire-code order.
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::BF16,
        DType::F16,
        DType::I32,
        DType::I64,
        DType::U8,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::BF16 | DType::F16 => 2,
            DType::U8 => 1,
        }
    }

    /// The name used on the command line and in reports (`f32`, `bf16`, …).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
        }
    }

    /// Decodes the wire code written by `self as u8`.
    pub fn from_code(code: u8) -> Option<DType> {
        DType::ALL.get(code as usize).copied()
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::Parse {
                what: "dtype",
                value: s.to_string(),
                reason: "expected one of f32, f64, bf16, f16, i32, i64, u8".into(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_code(d as u8), Some(d));
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
        assert_eq!(DType::from_code(200), None);
        assert!("f8".parse::<DType>().is_err());
    }
}
