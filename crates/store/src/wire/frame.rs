//! Request and response frames: `u32 body length (LE)`, then the body. Decoding borrows from
//! the body, so a 64 MiB value is never copied by the codec.

use super::codec::DecodeError;
use super::codec::{FrameWriter, Reader};
use super::limits::{MAX_FRAME_LEN, MAX_KEYS, MAX_KEY_LEN, MAX_VALUE_LEN};
use super::message::{op, tag};
pub use super::message::{Request, Response};

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
mod tests;
