//! Request and response frames: `u32 body length (LE)`, then the body. Decoding borrows from
//! the body, so a 64 MiB value is never copied by the codec.

use super::codec::{FrameWriter, Reader};
use super::{DecodeError, MAX_FRAME_LEN, MAX_KEYS, MAX_KEY_LEN, MAX_VALUE_LEN};

/// One client request. Timeouts travel with the blocking requests so that the server, not the
/// client, does the waiting (on a condvar, without polling).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    /// `set(key, value)`.
    Set {
        /// Key.
        key: &'a str,
        /// New value.
        value: &'a [u8],
    },
    /// `get(key)`, waiting at most `timeout_ms`.
    Get {
        /// Key.
        key: &'a str,
        /// How long the server may wait for the key.
        timeout_ms: u64,
    },
    /// `add(key, delta)`.
    Add {
        /// Key.
        key: &'a str,
        /// Increment.
        delta: i64,
    },
    /// `compare_set(key, expected, desired)`.
    CompareSet {
        /// Key.
        key: &'a str,
        /// Value expected now (empty = "missing").
        expected: &'a [u8],
        /// Value to set.
        desired: &'a [u8],
    },
    /// `wait(keys)`, at most `timeout_ms`.
    Wait {
        /// Keys that must all exist.
        keys: Vec<&'a str>,
        /// How long the server may wait.
        timeout_ms: u64,
    },
    /// `check(keys)`.
    Check {
        /// Keys to test.
        keys: Vec<&'a str>,
    },
    /// `delete_key(key)`.
    Delete {
        /// Key.
        key: &'a str,
    },
    /// `num_keys()`.
    NumKeys,
    /// `append(key, value)`.
    Append {
        /// Key.
        key: &'a str,
        /// Bytes to append.
        value: &'a [u8],
    },
    /// `multi_get(keys)`, waiting at most `timeout_ms`.
    MultiGet {
        /// Keys to read.
        keys: Vec<&'a str>,
        /// How long the server may wait.
        timeout_ms: u64,
    },
    /// `multi_set(keys, values)`.
    MultiSet {
        /// Key/value pairs.
        pairs: Vec<(&'a str, &'a [u8])>,
    },
}

impl Request<'_> {
    /// The store operation's name, for errors and logs.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Set { .. } => "set",
            Request::Get { .. } => "get",
            Request::Add { .. } => "add",
            Request::CompareSet { .. } => "compare_set",
            Request::Wait { .. } => "wait",
            Request::Check { .. } => "check",
            Request::Delete { .. } => "delete_key",
            Request::NumKeys => "num_keys",
            Request::Append { .. } => "append",
            Request::MultiGet { .. } => "multi_get",
            Request::MultiSet { .. } => "multi_set",
        }
    }
}

/// One server reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response<'a> {
    /// Done, nothing to return (`set`, `wait`, `append`, `multi_set`).
    Unit,
    /// A value (`get`, `compare_set`).
    Value(&'a [u8]),
    /// An integer (`add`, `num_keys`).
    Int(i64),
    /// A flag (`check`, `delete_key`).
    Bool(bool),
    /// Several values (`multi_get`).
    Values(Vec<&'a [u8]>),
    /// The wait ended with `key` still missing.
    Timeout {
        /// The first missing key.
        key: &'a str,
    },
    /// The operation was refused for `key` (e.g. `add` on a non-integer value).
    Error {
        /// The key involved (may be empty).
        key: &'a str,
        /// Why.
        message: &'a str,
    },
}

mod op {
    pub(super) const SET: u8 = 1;
    pub(super) const GET: u8 = 2;
    pub(super) const ADD: u8 = 3;
    pub(super) const COMPARE_SET: u8 = 4;
    pub(super) const WAIT: u8 = 5;
    pub(super) const CHECK: u8 = 6;
    pub(super) const DELETE: u8 = 7;
    pub(super) const NUM_KEYS: u8 = 8;
    pub(super) const APPEND: u8 = 9;
    pub(super) const MULTI_GET: u8 = 10;
    pub(super) const MULTI_SET: u8 = 11;
}

mod tag {
    pub(super) const UNIT: u8 = 0;
    pub(super) const VALUE: u8 = 1;
    pub(super) const INT: u8 = 2;
    pub(super) const BOOL: u8 = 3;
    pub(super) const VALUES: u8 = 4;
    pub(super) const TIMEOUT: u8 = 5;
    pub(super) const ERROR: u8 = 6;
}

/// Longest error message carried in a response.
const MAX_MESSAGE_LEN: usize = 4096;

fn check_key(key: &str) -> Result<(), DecodeError> {
    if key.len() > MAX_KEY_LEN {
        return Err(DecodeError::new(format!(
            "key of {} bytes exceeds the limit of {MAX_KEY_LEN}",
            key.len()
        )));
    }
    Ok(())
}

fn check_value(v: &[u8]) -> Result<(), DecodeError> {
    if v.len() > MAX_VALUE_LEN {
        return Err(DecodeError::new(format!(
            "value of {} bytes exceeds the limit of {MAX_VALUE_LEN}",
            v.len()
        )));
    }
    Ok(())
}

fn check_count(n: usize) -> Result<(), DecodeError> {
    if n > MAX_KEYS {
        return Err(DecodeError::new(format!(
            "{n} keys exceed the limit of {MAX_KEYS} per request"
        )));
    }
    Ok(())
}

fn too_large() -> DecodeError {
    DecodeError::new(format!(
        "message exceeds the frame limit of {MAX_FRAME_LEN} bytes"
    ))
}

/// Encodes a request as a whole frame (length prefix included), checking every limit the
/// server will check, so a client learns of a too-long key before anything is sent.
pub fn encode_request(req: &Request<'_>) -> Result<Vec<u8>, DecodeError> {
    let mut w = FrameWriter::new(64);
    let keys = |w: &mut FrameWriter, keys: &[&str]| -> Result<(), DecodeError> {
        check_count(keys.len())?;
        w.u32(keys.len() as u32);
        for k in keys {
            check_key(k)?;
            w.bytes(k.as_bytes());
        }
        Ok(())
    };
    match req {
        Request::Set { key, value } | Request::Append { key, value } => {
            check_key(key)?;
            check_value(value)?;
            let code = if matches!(req, Request::Set { .. }) {
                op::SET
            } else {
                op::APPEND
            };
            w.u8(code).bytes(key.as_bytes()).bytes(value);
        }
        Request::Get { key, timeout_ms } => {
            check_key(key)?;
            w.u8(op::GET).u64(*timeout_ms).bytes(key.as_bytes());
        }
        Request::Add { key, delta } => {
            check_key(key)?;
            w.u8(op::ADD).bytes(key.as_bytes()).i64(*delta);
        }
        Request::CompareSet {
            key,
            expected,
            desired,
        } => {
            check_key(key)?;
            check_value(expected)?;
            check_value(desired)?;
            w.u8(op::COMPARE_SET)
                .bytes(key.as_bytes())
                .bytes(expected)
                .bytes(desired);
        }
        Request::Wait {
            keys: k,
            timeout_ms,
        } => {
            w.u8(op::WAIT).u64(*timeout_ms);
            keys(&mut w, k)?;
        }
        Request::Check { keys: k } => {
            w.u8(op::CHECK);
            keys(&mut w, k)?;
        }
        Request::Delete { key } => {
            check_key(key)?;
            w.u8(op::DELETE).bytes(key.as_bytes());
        }
        Request::NumKeys => {
            w.u8(op::NUM_KEYS);
        }
        Request::MultiGet {
            keys: k,
            timeout_ms,
        } => {
            w.u8(op::MULTI_GET).u64(*timeout_ms);
            keys(&mut w, k)?;
        }
        Request::MultiSet { pairs } => {
            check_count(pairs.len())?;
            w.u8(op::MULTI_SET).u32(pairs.len() as u32);
            for (k, v) in pairs {
                check_key(k)?;
                check_value(v)?;
                w.bytes(k.as_bytes()).bytes(v);
            }
        }
    }
    w.finish().ok_or_else(too_large)
}

fn read_keys<'a>(r: &mut Reader<'a>) -> Result<Vec<&'a str>, DecodeError> {
    let n = r.count(MAX_KEYS, 4, "key count")?;
    (0..n).map(|_| r.str(MAX_KEY_LEN, "key")).collect()
}

/// Decodes a request body (the bytes after the length prefix). Every length and count is
/// checked against the limits and the bytes present before anything is allocated.
pub fn decode_request(body: &[u8]) -> Result<Request<'_>, DecodeError> {
    let mut r = Reader::new(body);
    let req = match r.u8("opcode")? {
        op::SET => Request::Set {
            key: r.str(MAX_KEY_LEN, "key")?,
            value: r.bytes(MAX_VALUE_LEN, "value")?,
        },
        op::GET => {
            let timeout_ms = r.u64("timeout")?;
            Request::Get {
                key: r.str(MAX_KEY_LEN, "key")?,
                timeout_ms,
            }
        }
        op::ADD => Request::Add {
            key: r.str(MAX_KEY_LEN, "key")?,
            delta: r.i64("delta")?,
        },
        op::COMPARE_SET => Request::CompareSet {
            key: r.str(MAX_KEY_LEN, "key")?,
            expected: r.bytes(MAX_VALUE_LEN, "expected value")?,
            desired: r.bytes(MAX_VALUE_LEN, "desired value")?,
        },
        op::WAIT => {
            let timeout_ms = r.u64("timeout")?;
            Request::Wait {
                keys: read_keys(&mut r)?,
                timeout_ms,
            }
        }
        op::CHECK => Request::Check {
            keys: read_keys(&mut r)?,
        },
        op::DELETE => Request::Delete {
            key: r.str(MAX_KEY_LEN, "key")?,
        },
        op::NUM_KEYS => Request::NumKeys,
        op::APPEND => Request::Append {
            key: r.str(MAX_KEY_LEN, "key")?,
            value: r.bytes(MAX_VALUE_LEN, "value")?,
        },
        op::MULTI_GET => {
            let timeout_ms = r.u64("timeout")?;
            Request::MultiGet {
                keys: read_keys(&mut r)?,
                timeout_ms,
            }
        }
        op::MULTI_SET => {
            let n = r.count(MAX_KEYS, 8, "pair count")?;
            let pairs = (0..n)
                .map(|_| Ok((r.str(MAX_KEY_LEN, "key")?, r.bytes(MAX_VALUE_LEN, "value")?)))
                .collect::<Result<_, DecodeError>>()?;
            Request::MultiSet { pairs }
        }
        other => return Err(DecodeError::new(format!("unknown opcode {other}"))),
    };
    r.end()?;
    Ok(req)
}

/// Encodes a response as a whole frame; fails only when it would exceed the frame limit
/// (a `multi_get` of many large values), which the server reports as an error response.
pub fn encode_response(resp: &Response<'_>) -> Result<Vec<u8>, DecodeError> {
    let mut w = FrameWriter::new(16);
    match resp {
        Response::Unit => {
            w.u8(tag::UNIT);
        }
        Response::Value(v) => {
            w.u8(tag::VALUE).bytes(v);
        }
        Response::Int(i) => {
            w.u8(tag::INT).i64(*i);
        }
        Response::Bool(b) => {
            w.u8(tag::BOOL).u8(u8::from(*b));
        }
        Response::Values(vs) => {
            w.u8(tag::VALUES).u32(vs.len() as u32);
            for v in vs {
                w.bytes(v);
            }
        }
        Response::Timeout { key } => {
            w.u8(tag::TIMEOUT).bytes(key.as_bytes());
        }
        Response::Error { key, message } => {
            let message = &message[..floor_char_boundary(message, MAX_MESSAGE_LEN)];
            w.u8(tag::ERROR)
                .bytes(key.as_bytes())
                .bytes(message.as_bytes());
        }
    }
    w.finish().ok_or_else(too_large)
}

fn floor_char_boundary(s: &str, max: usize) -> usize {
    let mut i = s.len().min(max);
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Decodes a response body.
pub fn decode_response(body: &[u8]) -> Result<Response<'_>, DecodeError> {
    let mut r = Reader::new(body);
    let resp = match r.u8("response tag")? {
        tag::UNIT => Response::Unit,
        tag::VALUE => Response::Value(r.bytes(MAX_VALUE_LEN, "value")?),
        tag::INT => Response::Int(r.i64("integer")?),
        tag::BOOL => match r.u8("flag")? {
            0 => Response::Bool(false),
            1 => Response::Bool(true),
            b => {
                return Err(DecodeError::new(format!(
                    "flag byte {b} is neither 0 nor 1"
                )))
            }
        },
        tag::VALUES => {
            let n = r.count(MAX_KEYS, 4, "value count")?;
            Response::Values(
                (0..n)
                    .map(|_| r.bytes(MAX_VALUE_LEN, "value"))
                    .collect::<Result<_, _>>()?,
            )
        }
        tag::TIMEOUT => Response::Timeout {
            key: r.str(MAX_KEY_LEN, "key")?,
        },
        tag::ERROR => Response::Error {
            key: r.str(MAX_KEY_LEN, "key")?,
            message: r.str(MAX_MESSAGE_LEN, "message")?,
        },
        other => return Err(DecodeError::new(format!("unknown response tag {other}"))),
    };
    r.end()?;
    Ok(resp)
}

/// The body length announced by a frame header, refused past [`MAX_FRAME_LEN`] before
/// anything is allocated.
pub fn frame_len(header: [u8; 4]) -> Result<usize, DecodeError> {
    let n = u32::from_le_bytes(header) as usize;
    if n > MAX_FRAME_LEN {
        return Err(DecodeError::new(format!(
            "frame of {n} bytes exceeds the limit of {MAX_FRAME_LEN}"
        )));
    }
    Ok(n)
}

/// Splits the first whole frame off `buf`: `Ok(None)` when more bytes are needed, otherwise
/// the body and the number of bytes it used.
pub fn split_frame(buf: &[u8]) -> Result<Option<(&[u8], usize)>, DecodeError> {
    let Some(header) = buf.get(..4) else {
        return Ok(None);
    };
    let n = frame_len(header.try_into().expect("4 bytes"))?;
    Ok(buf.get(4..4 + n).map(|body| (body, 4 + n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_requests() -> Vec<Request<'static>> {
        vec![
            Request::Set {
                key: "a",
                value: b"1",
            },
            Request::Get {
                key: "k",
                timeout_ms: 300_000,
            },
            Request::Add {
                key: "n",
                delta: -3,
            },
            Request::CompareSet {
                key: "c",
                expected: b"",
                desired: b"d",
            },
            Request::Wait {
                keys: vec!["x", "y"],
                timeout_ms: 5,
            },
            Request::Check { keys: vec![] },
            Request::Delete { key: "gone" },
            Request::NumKeys,
            Request::Append {
                key: "log",
                value: b"more",
            },
            Request::MultiGet {
                keys: vec!["p", ""],
                timeout_ms: 0,
            },
            Request::MultiSet {
                pairs: vec![("p", b"1"), ("q", b"")],
            },
        ]
    }

    fn all_responses() -> Vec<Response<'static>> {
        vec![
            Response::Unit,
            Response::Value(b"v"),
            Response::Int(i64::MIN),
            Response::Bool(true),
            Response::Values(vec![b"a", b""]),
            Response::Timeout { key: "k" },
            Response::Error {
                key: "k",
                message: "not an integer",
            },
        ]
    }

    #[test]
    fn requests_round_trip() {
        for req in all_requests() {
            let frame = encode_request(&req).unwrap();
            let (body, used) = split_frame(&frame).unwrap().unwrap();
            assert_eq!(used, frame.len());
            assert_eq!(decode_request(body).unwrap(), req);
        }
    }

    #[test]
    fn responses_round_trip() {
        for resp in all_responses() {
            let frame = encode_response(&resp).unwrap();
            let (body, _) = split_frame(&frame).unwrap().unwrap();
            assert_eq!(decode_response(body).unwrap(), resp);
        }
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        for req in all_requests() {
            let frame = encode_request(&req).unwrap();
            let body = &frame[4..];
            for cut in 0..body.len() {
                assert!(
                    decode_request(&body[..cut]).is_err(),
                    "{req:?} cut at {cut}"
                );
            }
            assert_eq!(split_frame(&frame[..frame.len() - 1]).unwrap(), None);
        }
        for resp in all_responses() {
            let frame = encode_response(&resp).unwrap();
            for cut in 0..frame.len() - 4 {
                assert!(
                    decode_response(&frame[4..4 + cut]).is_err(),
                    "{resp:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn trailing_bytes_and_unknown_codes_are_refused() {
        let mut frame = encode_request(&Request::NumKeys).unwrap();
        frame.push(0);
        assert!(decode_request(&frame[4..])
            .unwrap_err()
            .reason()
            .contains("trailing"));
        assert!(decode_request(&[200])
            .unwrap_err()
            .reason()
            .contains("opcode"));
        assert!(decode_response(&[99]).is_err());
        assert!(decode_response(&[tag::BOOL, 2]).is_err());
    }

    #[test]
    fn oversized_lengths_are_refused_before_allocation() {
        assert!(frame_len(u32::MAX.to_le_bytes()).is_err());
        assert!(split_frame(&[0xff, 0xff, 0xff, 0xff]).is_err());
        // A key length past the limit, with no bytes behind it.
        let mut body = vec![op::SET];
        body.extend_from_slice(&(MAX_KEY_LEN as u32 + 1).to_le_bytes());
        assert!(decode_request(&body)
            .unwrap_err()
            .reason()
            .contains("limit"));
        // A key count that the remaining bytes cannot hold.
        let mut body = vec![op::CHECK];
        body.extend_from_slice(&1000u32.to_le_bytes());
        assert!(decode_request(&body).is_err());
        // Invalid UTF-8 in a key.
        let mut body = vec![op::DELETE];
        body.extend_from_slice(&2u32.to_le_bytes());
        body.extend_from_slice(&[0xff, 0xfe]);
        assert!(decode_request(&body)
            .unwrap_err()
            .reason()
            .contains("UTF-8"));
    }

    #[test]
    fn encoder_checks_limits() {
        let long = "k".repeat(MAX_KEY_LEN + 1);
        assert!(encode_request(&Request::Delete { key: &long }).is_err());
        let keys = vec!["k"; MAX_KEYS + 1];
        assert!(encode_request(&Request::Check { keys }).is_err());
    }

    #[test]
    fn long_error_messages_are_cut_on_a_char_boundary() {
        let msg = "é".repeat(MAX_MESSAGE_LEN);
        let frame = encode_response(&Response::Error {
            key: "k",
            message: &msg,
        })
        .unwrap();
        match decode_response(&frame[4..]).unwrap() {
            Response::Error { message, .. } => assert!(message.len() <= MAX_MESSAGE_LEN),
            other => panic!("{other:?}"),
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = decode_request(&bytes);
            let _ = decode_response(&bytes);
            let _ = split_frame(&bytes);
        }

        #[test]
        fn set_round_trips(key in ".{0,40}", value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let req = Request::Set { key: &key, value: &value };
            let frame = encode_request(&req).unwrap();
            proptest::prop_assert_eq!(decode_request(&frame[4..]).unwrap(), req);
        }
    }
}
