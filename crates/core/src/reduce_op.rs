//! Reduce operations of allreduce, reduce_scatter and reduce.

use std::{fmt, str::FromStr};

use crate::Error;

/// How a reducing collective combines the ranks' elements.
///
/// `Avg` is a sum followed by a division by the world size, done once at the end so that the
/// result is the same whatever the algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ReduceOp {
    /// Element-wise sum.
    Sum = 0,
    /// Element-wise mean over ranks.
    Avg = 1,
    /// Element-wise minimum.
    Min = 2,
    /// Element-wise maximum.
    Max = 3,
    /// Element-wise product.
    Product = 4,
    /// Bitwise and (integer dtypes only).
    BAnd = 5,
    /// Bitwise or (integer dtypes only).
    BOr = 6,
    /// Bitwise exclusive or (integer dtypes only).
    BXor = 7,
}

impl ReduceOp {
    /// Every op, in wire-code order.
    pub const ALL: [ReduceOp; 8] = [
        ReduceOp::Sum,
        ReduceOp::Avg,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Product,
        ReduceOp::BAnd,
        ReduceOp::BOr,
        ReduceOp::BXor,
    ];

    /// Lower-case name (`sum`, `avg`, …).
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Product => "product",
            ReduceOp::BAnd => "band",
            ReduceOp::BOr => "bor",
            ReduceOp::BXor => "bxor",
        }
    }

    /// Whether it is a bitwise op, defined on integer dtypes only (PyTorch's BAND, BOR, BXOR).
    pub const fn is_bitwise(self) -> bool {
        matches!(self, ReduceOp::BAnd | ReduceOp::BOr | ReduceOp::BXor)
    }

    /// Decodes the wire code written by `self as u8`.
    pub fn from_code(code: u8) -> Option<ReduceOp> {
        ReduceOp::ALL.get(code as usize).copied()
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReduceOp {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        ReduceOp::ALL
            .iter()
            .copied()
            .find(|o| o.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::Parse {
                what: "reduce op",
                value: s.to_string(),
                reason: "expected one of sum, avg, min, max, product, band, bor, bxor".into(),
            })
    }
}
