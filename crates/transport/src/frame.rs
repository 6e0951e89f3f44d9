//! Sans-IO framing: every message between two ranks is a 32-byte header and a payload.
//!
//! ```text
//! offset  size  field
//!      0     1  frame type: 0xD1 data, 0xAB abort (payload = UTF-8 reason)
//!      1     1  collective kind (CollectiveKind code)
//!      2     1  reduce op code, 0xFF when none
//!      3     1  dtype code
//!      4     4  payload length in bytes (u32 LE), at most MAX_PAYLOAD
//!      8     8  sequence number (u64 LE)
//!     16     8  element count of the whole collective (u64 LE)
//!     24     4  root / tag (u32 LE)
//!     28     4  reserved, zero
//! ```
//! Decoding validates every field before the payload is read, so a corrupt or hostile peer
//! can make the connection fail but never make us allocate or misread.

use phalanx_core::{DType, ReduceOp};

use crate::{CollectiveKind, Fingerprint};

/// Size of a frame header in bytes.
pub const HEADER_LEN: usize = 32;
/// Largest payload one frame may carry (collectives split larger buffers into chunks).
pub const MAX_PAYLOAD: usize = 1 << 30;
/// Largest abort reason accepted.
pub const MAX_REASON: usize = 4096;

const TYPE_DATA: u8 = 0xD1;
const TYPE_ABORT: u8 = 0xAB;
const NO_OP: u8 = 0xFF;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A data frame of `len` payload bytes belonging to the collective `fp`.
    Data {
        /// The collective it belongs to.
        fp: Fingerprint,
        /// Payload length.
        len: usize,
    },
    /// The peer gave up; `len` bytes of UTF-8 reason follow.
    Abort {
        /// Reason length.
        len: usize,
    },
}

/// Why a header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Unknown frame type byte.
    #[error("unknown frame type 0x{0:02x}")]
    BadType(u8),
    /// Unknown collective, op or dtype code.
    #[error("unknown {what} code {code}")]
    BadCode {
        /// Which field.
        what: &'static str,
        /// The code seen.
        code: u8,
    },
    /// Payload length over the limit.
    #[error("payload length {len} exceeds the limit {max}")]
    TooLong {
        /// Length announced.
        len: usize,
        /// Limit.
        max: usize,
    },
}

/// Encodes a data frame header.
pub fn encode_data(fp: &Fingerprint, len: usize) -> [u8; HEADER_LEN] {
    debug_assert!(len <= MAX_PAYLOAD);
    let mut h = [0u8; HEADER_LEN];
    h[0] = TYPE_DATA;
    h[1] = fp.kind as u8;
    h[2] = fp.op.map_or(NO_OP, |o| o as u8);
    h[3] = fp.dtype as u8;
    h[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    h[8..16].copy_from_slice(&fp.seq.to_le_bytes());
    h[16..24].copy_from_slice(&fp.count.to_le_bytes());
    h[24..28].copy_from_slice(&fp.root.to_le_bytes());
    h
}

/// Encodes an abort frame (header followed by the truncated reason).
pub fn encode_abort(reason: &str) -> Vec<u8> {
    let mut r = reason.as_bytes();
    if r.len() > MAX_REASON {
        r = &r[..MAX_REASON];
    }
    let mut out = vec![0u8; HEADER_LEN];
    out[0] = TYPE_ABORT;
    out[4..8].copy_from_slice(&(r.len() as u32).to_le_bytes());
    out.extend_from_slice(r);
    out
}

/// Decodes and validates a header.
pub fn decode(h: &[u8; HEADER_LEN]) -> Result<Header, FrameError> {
    let len = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
    match h[0] {
        TYPE_ABORT => {
            if len > MAX_REASON {
                return Err(FrameError::TooLong {
                    len,
                    max: MAX_REASON,
                });
            }
            Ok(Header::Abort { len })
        }
        TYPE_DATA => {
            if len > MAX_PAYLOAD {
                return Err(FrameError::TooLong {
                    len,
                    max: MAX_PAYLOAD,
                });
            }
            let kind = CollectiveKind::from_code(h[1]).ok_or(FrameError::BadCode {
                what: "collective",
                code: h[1],
            })?;
            let op = match h[2] {
                NO_OP => None,
                c => Some(ReduceOp::from_code(c).ok_or(FrameError::BadCode {
                    what: "reduce op",
                    code: c,
                })?),
            };
            let dtype = DType::from_code(h[3]).ok_or(FrameError::BadCode {
                what: "dtype",
                code: h[3],
            })?;
            let fp = Fingerprint {
                seq: u64::from_le_bytes(h[8..16].try_into().unwrap()),
                kind,
                op,
                dtype,
                count: u64::from_le_bytes(h[16..24].try_into().unwrap()),
                root: u32::from_le_bytes(h[24..28].try_into().unwrap()),
            };
            Ok(Header::Data { fp, len })
        }
        t => Err(FrameError::BadType(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp() -> Fingerprint {
        Fingerprint {
            seq: 1580,
            kind: CollectiveKind::Allreduce,
            op: Some(ReduceOp::Avg),
            dtype: DType::BF16,
            count: 1 << 40,
            root: 3,
        }
    }

    #[test]
    fn data_round_trip() {
        let h = encode_data(&fp(), 4096);
        assert_eq!(
            decode(&h).unwrap(),
            Header::Data {
                fp: fp(),
                len: 4096
            }
        );
        let none = Fingerprint { op: None, ..fp() };
        assert_eq!(
            decode(&encode_data(&none, 0)).unwrap(),
            Header::Data { fp: none, len: 0 }
        );
    }

    #[test]
    fn abort_round_trip_and_truncation() {
        let a = encode_abort("rank 2 failed");
        assert_eq!(
            decode(a[..HEADER_LEN].try_into().unwrap()).unwrap(),
            Header::Abort { len: 13 }
        );
        assert_eq!(&a[HEADER_LEN..], b"rank 2 failed");
        let long = encode_abort(&"x".repeat(10_000));
        assert_eq!(long.len(), HEADER_LEN + MAX_REASON);
    }

    #[test]
    fn rejects_garbage() {
        let mut h = encode_data(&fp(), 8);
        h[0] = 0;
        assert_eq!(decode(&h), Err(FrameError::BadType(0)));
        let mut h = encode_data(&fp(), 8);
        h[3] = 99;
        assert!(matches!(
            decode(&h),
            Err(FrameError::BadCode { what: "dtype", .. })
        ));
        let mut h = encode_data(&fp(), 8);
        h[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&h), Err(FrameError::TooLong { .. })));
        let mut a = [0u8; HEADER_LEN];
        a[0] = TYPE_ABORT;
        a[4..8].copy_from_slice(&100_000u32.to_le_bytes());
        assert!(matches!(decode(&a), Err(FrameError::TooLong { .. })));
    }

    #[test]
    fn every_byte_pattern_decodes_or_errors() {
        // Cheap exhaustive-ish check: no header panics the decoder.
        for b0 in [0u8, TYPE_DATA, TYPE_ABORT, 0xFF] {
            for b in 0..=255u8 {
                let mut h = [b; HEADER_LEN];
                h[0] = b0;
                let _ = decode(&h);
            }
        }
    }
}
