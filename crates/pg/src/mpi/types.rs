//! How phalanx's types, ops and lengths map onto MPI's: datatypes, built-in ops, and the
//! `int` counts one MPI call takes (Note [MPI_IN_PLACE value] is in `comm.rs`).

use std::os::raw::c_int;

use mpi::ffi;
use phalanx_core::{DType, ReduceOp};

/// The largest count one MPI call takes (`int`).
pub(super) const MAX_COUNT: usize = c_int::MAX as usize;

pub(super) fn world() -> ffi::MPI_Comm {
    // SAFETY: a constant handle exported by mpi-sys, valid between init and finalize.
    unsafe { ffi::RSMPI_COMM_WORLD }
}

/// MPI's type for reducing `dtype`; `None` for bf16/f16 (reduced as f32).
pub(super) fn reduce_type(dtype: DType) -> Option<ffi::MPI_Datatype> {
    // SAFETY: constant handles exported by mpi-sys.
    unsafe {
        match dtype {
            DType::F32 => Some(ffi::RSMPI_FLOAT),
            DType::F64 => Some(ffi::RSMPI_DOUBLE),
            DType::I32 => Some(ffi::RSMPI_INT32_T),
            DType::I64 => Some(ffi::RSMPI_INT64_T),
            DType::U8 => Some(ffi::RSMPI_UINT8_T),
            DType::BF16 | DType::F16 => None,
        }
    }
}

pub(super) fn reduce_op(op: ReduceOp) -> ffi::MPI_Op {
    // SAFETY: constant handles exported by mpi-sys.
    unsafe {
        match op {
            ReduceOp::Sum | ReduceOp::Avg => ffi::RSMPI_SUM,
            ReduceOp::Min => ffi::RSMPI_MIN,
            ReduceOp::Max => ffi::RSMPI_MAX,
            ReduceOp::Product => ffi::RSMPI_PROD,
            ReduceOp::BAnd => ffi::RSMPI_BAND,
            ReduceOp::BOr => ffi::RSMPI_BOR,
            ReduceOp::BXor => ffi::RSMPI_BXOR,
        }
    }
}

pub(super) fn bytes_type() -> ffi::MPI_Datatype {
    // SAFETY: a constant handle exported by mpi-sys.
    unsafe { ffi::RSMPI_UINT8_T }
}

/// `(offset, length)` of the `MAX_COUNT`-byte pieces a point-to-point message of `bytes` travels
/// in. A zero-length message is still one (empty) piece: the receiver waits for it.
pub(super) fn message_chunks(bytes: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..bytes.div_ceil(MAX_COUNT).max(1)).map(move |i| {
        let at = i * MAX_COUNT;
        (at, (bytes - at).min(MAX_COUNT))
    })
}

/// An argument MPI's `int` counts cannot express.
pub(super) fn too_large(op: &'static str, rank: usize, what: usize) -> phalanx_transport::Error {
    phalanx_transport::Error::Io {
        op,
        peer: rank,
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{what} elements per rank exceed MPI's int count ({MAX_COUNT})"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_split_at_mpis_int_count_and_empty_ones_still_travel() {
        assert_eq!(message_chunks(0).collect::<Vec<_>>(), [(0, 0)]);
        assert_eq!(message_chunks(5).collect::<Vec<_>>(), [(0, 5)]);
        assert_eq!(
            message_chunks(2 * MAX_COUNT + 3).collect::<Vec<_>>(),
            [(0, MAX_COUNT), (MAX_COUNT, MAX_COUNT), (2 * MAX_COUNT, 3)]
        );
    }
}
