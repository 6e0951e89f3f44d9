//! The [`Fingerprint`] of one collective call (its sequence number, kind, op, element type,
//! count and root), built the same way by every algorithm.

use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{CollectiveKind, Fingerprint};

/// The fingerprint of call `seq`: a `kind` collective over `count` elements of `T`.
pub(crate) fn fp<T: Element>(
    seq: u64,
    kind: CollectiveKind,
    op: Option<ReduceOp>,
    count: usize,
    root: usize,
) -> Fingerprint {
    Fingerprint {
        seq,
        kind,
        op,
        dtype: T::DTYPE,
        count: count as u64,
        root: root as u32,
    }
}
