//! PyTorch's TCPStore protocol (torch 2.x, `c10d::detail::QueryType`), sans-IO: what a torch
//! client sends and what a torch server answers, as pure functions over byte slices. The store
//! server speaks it to PyTorch clients on phalanx's own port (told apart by the first byte, see
//! Note [Two protocols on one port]); [`crate::TorchStore`] speaks it to torchrun's store.
//!
//! Every message is a one-byte query type followed by its fields, with no frame around them:
//! strings and byte vectors are `u64 length (LE) + bytes`, integers little-endian. A connection
//! opens with `VALIDATE` (`0x00` and the magic `0x3C85F7CE`), then `PING` with a nonce that the
//! server echoes. Only some queries have a reply ([`Request::reply_kind`]); `WAIT` and `BARRIER`
//! answer when their condition holds, or `WAIT_CANCELED` once the client sends `CANCEL_WAIT`.
//! Decoders return `Ok(None)` while the bytes so far are a prefix of a valid message, so a
//! reader can feed them whatever the socket gave it; every length is checked against this
//! crate's limits before anything is kept.
//!
//! ```
//! use phalanx_store::wire::torch::{decode_request, encode_request, Request};
//! let set = encode_request(&Request::Set { key: "/k", value: b"v1" }).unwrap();
//! assert_eq!(decode_request(&set[..5]).unwrap(), None); // not all there yet
//! let (req, used) = decode_request(&set).unwrap().unwrap();
//! assert_eq!((req, used), (Request::Set { key: "/k", value: b"v1" }, set.len()));
//! ```

use super::codec::DecodeError;
use super::limits::{MAX_KEYS, MAX_KEY_LEN, MAX_VALUE_LEN};

/// The number a torch client sends after `VALIDATE`.
pub const VALIDATION_MAGIC: u32 = 0x3C85_F7CE;
/// The first byte of every torch client connection (`QueryType::VALIDATE`).
pub const VALIDATE: u8 = 0;
/// `WaitResponseType::STOP_WAITING` and `CheckResponseType::READY`.
pub const STOP_WAITING: u8 = 0;
/// `WaitResponseType::WAIT_CANCELED` and `CheckResponseType::NOT_READY`.
pub const WAIT_CANCELED: u8 = 1;

/// Query types in wire order (`c10d::detail::QueryType` of torch 2.15).
mod query {
    pub(super) const VALIDATE: u8 = 0;
    pub(super) const SET: u8 = 1;
    pub(super) const COMPARE_SET: u8 = 2;
    pub(super) const GET: u8 = 3;
    pub(super) const ADD: u8 = 4;
    pub(super) const CHECK: u8 = 5;
    pub(super) const WAIT: u8 = 6;
    pub(super) const GET_NUM_KEYS: u8 = 7;
    pub(super) const DELETE_KEY: u8 = 8;
    pub(super) const APPEND: u8 = 9;
    pub(super) const MULTI_GET: u8 = 10;
    pub(super) const MULTI_SET: u8 = 11;
    pub(super) const CANCEL_WAIT: u8 = 12;
    pub(super) const PING: u8 = 13;
    pub(super) const QUEUE_PUSH: u8 = 14;
    pub(super) const QUEUE_POP: u8 = 15;
    pub(super) const QUEUE_LEN: u8 = 16;
    pub(super) const LIST_KEYS: u8 = 17;
    pub(super) const BARRIER: u8 = 18;
}

/// One query of a torch client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    /// The connection's first message.
    Validate {
        /// Must be [`VALIDATION_MAGIC`].
        magic: u32,
    },
    /// Liveness check; the server echoes the nonce.
    Ping {
        /// Any number.
        nonce: u32,
    },
    /// `set(key, value)`; no reply.
    Set {
        /// Key.
        key: &'a str,
        /// Value.
        value: &'a [u8],
    },
    /// `compare_set`; replies with the value after it (PyTorch's four cases).
    CompareSet {
        /// Key.
        key: &'a str,
        /// Expected value (empty: "missing").
        expected: &'a [u8],
        /// Value to set.
        desired: &'a [u8],
    },
    /// The value of a key (empty when missing; clients `WAIT` first).
    Get {
        /// Key.
        key: &'a str,
    },
    /// Adds to a decimal counter; replies with the new value.
    Add {
        /// Key.
        key: &'a str,
        /// Increment.
        delta: i64,
    },
    /// Whether every key exists (or names a non-empty queue).
    Check {
        /// Keys.
        keys: Vec<&'a str>,
    },
    /// Replies `STOP_WAITING` once every key exists, however long that takes.
    Wait {
        /// Keys.
        keys: Vec<&'a str>,
    },
    /// Number of keys.
    NumKeys,
    /// Deletes a key; replies with the number deleted.
    DeleteKey {
        /// Key.
        key: &'a str,
    },
    /// Appends to a value; no reply.
    Append {
        /// Key.
        key: &'a str,
        /// Bytes to append.
        value: &'a [u8],
    },
    /// The values of keys (empty for missing ones; clients `WAIT` first).
    MultiGet {
        /// Keys.
        keys: Vec<&'a str>,
    },
    /// Sets several keys; no reply.
    MultiSet {
        /// Key/value pairs.
        pairs: Vec<(&'a str, &'a [u8])>,
    },
    /// Ends the pending `WAIT` or `BARRIER`; always replies `WAIT_CANCELED`.
    CancelWait,
    /// Pushes onto a queue; no reply.
    QueuePush {
        /// Queue name.
        key: &'a str,
        /// Element.
        value: &'a [u8],
    },
    /// Pops the queue's head; replies with the length before and the element, if any.
    QueuePop {
        /// Queue name.
        key: &'a str,
    },
    /// Length of a queue.
    QueueLen {
        /// Queue name.
        key: &'a str,
    },
    /// Every key.
    ListKeys,
    /// Replies `STOP_WAITING` once `world_size` clients have entered barrier `key`.
    Barrier {
        /// Barrier name.
        key: &'a str,
        /// Clients it waits for.
        world_size: i64,
    },
}

/// The shape of the reply a query gets, which the reply's bytes alone do not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    /// A `u32` (`PING`).
    Nonce,
    /// One byte vector (`GET`, `COMPARE_SET`).
    Value,
    /// An `i64` (`ADD`, `GETNUMKEYS`, `DELETE_KEY`, `QUEUE_LEN`).
    Int,
    /// One status byte (`CHECK`, `WAIT`, `CANCEL_WAIT`, `BARRIER`).
    Status,
    /// This many byte vectors (`MULTI_GET`).
    Values(usize),
    /// `i64` queue length, then the element when it was not empty (`QUEUE_POP`).
    Popped,
    /// `i64` count, then that many strings (`LIST_KEYS`).
    Keys,
}

/// A server's answer to one query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    /// See [`ReplyKind::Nonce`].
    Nonce(u32),
    /// See [`ReplyKind::Value`].
    Value(&'a [u8]),
    /// See [`ReplyKind::Int`].
    Int(i64),
    /// See [`ReplyKind::Status`]: [`STOP_WAITING`] / [`WAIT_CANCELED`] (or READY / NOT_READY).
    Status(u8),
    /// See [`ReplyKind::Values`].
    Values(Vec<&'a [u8]>),
    /// See [`ReplyKind::Popped`].
    Popped {
        /// The queue's length before the pop.
        len: i64,
        /// Its head, `None` when it was empty.
        head: Option<&'a [u8]>,
    },
    /// See [`ReplyKind::Keys`].
    Keys(Vec<&'a str>),
}

impl Request<'_> {
    /// The reply the server sends, `None` for queries answered by nothing.
    pub fn reply_kind(&self) -> Option<ReplyKind> {
        Some(match self {
            Request::Validate { .. }
            | Request::Set { .. }
            | Request::Append { .. }
            | Request::MultiSet { .. }
            | Request::QueuePush { .. } => return None,
            Request::Ping { .. } => ReplyKind::Nonce,
            Request::CompareSet { .. } | Request::Get { .. } => ReplyKind::Value,
            Request::Add { .. }
            | Request::NumKeys
            | Request::DeleteKey { .. }
            | Request::QueueLen { .. } => ReplyKind::Int,
            Request::Check { .. }
            | Request::Wait { .. }
            | Request::CancelWait
            | Request::Barrier { .. } => ReplyKind::Status,
            Request::MultiGet { keys } => ReplyKind::Values(keys.len()),
            Request::QueuePop { .. } => ReplyKind::Popped,
            Request::ListKeys => ReplyKind::Keys,
        })
    }

    /// The query's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Validate { .. } => "validate",
            Request::Ping { .. } => "ping",
            Request::Set { .. } => "set",
            Request::CompareSet { .. } => "compare_set",
            Request::Get { .. } => "get",
            Request::Add { .. } => "add",
            Request::Check { .. } => "check",
            Request::Wait { .. } => "wait",
            Request::NumKeys => "num_keys",
            Request::DeleteKey { .. } => "delete_key",
            Request::Append { .. } => "append",
            Request::MultiGet { .. } => "multi_get",
            Request::MultiSet { .. } => "multi_set",
            Request::CancelWait => "cancel_wait",
            Request::QueuePush { .. } => "queue_push",
            Request::QueuePop { .. } => "queue_pop",
            Request::QueueLen { .. } => "queue_len",
            Request::ListKeys => "list_keys",
            Request::Barrier { .. } => "barrier",
        }
    }
}

/// Why decoding stopped: the bytes end early (wait for more) or cannot be a message.
enum Stop {
    More,
    Bad(DecodeError),
}

impl From<DecodeError> for Stop {
    fn from(e: DecodeError) -> Self {
        Stop::Bad(e)
    }
}

/// A cursor over bytes that may end in the middle of a message.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Stop> {
        let end = self.at.checked_add(n).ok_or(Stop::More)?;
        let s = self.buf.get(self.at..end).ok_or(Stop::More)?;
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, Stop> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, Stop> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, Stop> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn i64(&mut self) -> Result<i64, Stop> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// `u64 length + bytes`, the length checked against `max` before waiting for the bytes.
    fn vector(&mut self, max: usize, what: &str) -> Result<&'a [u8], Stop> {
        let n = self.u64()?;
        if n > max as u64 {
            return Err(Stop::Bad(DecodeError::new(format!(
                "{what} of {n} bytes exceeds the limit of {max}"
            ))));
        }
        self.take(n as usize)
    }
    fn key(&mut self) -> Result<&'a str, Stop> {
        let b = self.vector(MAX_KEY_LEN, "key")?;
        Ok(std::str::from_utf8(b).map_err(|_| DecodeError::new("key is not UTF-8"))?)
    }
    fn count(&mut self, max: usize, what: &str) -> Result<usize, Stop> {
        let n = self.u64()?;
        if n > max as u64 {
            return Err(Stop::Bad(DecodeError::new(format!(
                "{what} of {n} exceeds the limit of {max}"
            ))));
        }
        Ok(n as usize)
    }
    /// `u64 count` keys. The vector grows only as keys arrive: a lying count costs nothing.
    fn keys(&mut self) -> Result<Vec<&'a str>, Stop> {
        let n = self.count(MAX_KEYS, "key count")?;
        let mut keys = Vec::new();
        for _ in 0..n {
            keys.push(self.key()?);
        }
        Ok(keys)
    }
}

fn finish<T>(r: Result<T, Stop>, at: usize) -> Result<Option<(T, usize)>, DecodeError> {
    match r {
        Ok(v) => Ok(Some((v, at))),
        Err(Stop::More) => Ok(None),
        Err(Stop::Bad(e)) => Err(e),
    }
}

/// Decodes the query at the start of `buf`: the query and the bytes it used, `None` when `buf`
/// is a proper prefix of one, or an error naming the field at fault.
pub fn decode_request(buf: &[u8]) -> Result<Option<(Request<'_>, usize)>, DecodeError> {
    let mut c = Cursor { buf, at: 0 };
    let r = read_request(&mut c);
    finish(r, c.at)
}

fn read_request<'a>(c: &mut Cursor<'a>) -> Result<Request<'a>, Stop> {
    use query as q;
    Ok(match c.u8()? {
        q::VALIDATE => Request::Validate { magic: c.u32()? },
        q::PING => Request::Ping { nonce: c.u32()? },
        q::SET => Request::Set {
            key: c.key()?,
            value: c.vector(MAX_VALUE_LEN, "value")?,
        },
        q::COMPARE_SET => Request::CompareSet {
            key: c.key()?,
            expected: c.vector(MAX_VALUE_LEN, "expected value")?,
            desired: c.vector(MAX_VALUE_LEN, "desired value")?,
        },
        q::GET => Request::Get { key: c.key()? },
        q::ADD => Request::Add {
            key: c.key()?,
            delta: c.i64()?,
        },
        q::CHECK => Request::Check { keys: c.keys()? },
        q::WAIT => Request::Wait { keys: c.keys()? },
        q::GET_NUM_KEYS => Request::NumKeys,
        q::DELETE_KEY => Request::DeleteKey { key: c.key()? },
        q::APPEND => Request::Append {
            key: c.key()?,
            value: c.vector(MAX_VALUE_LEN, "value")?,
        },
        q::MULTI_GET => Request::MultiGet { keys: c.keys()? },
        q::MULTI_SET => {
            let n = c.count(MAX_KEYS, "key count")?;
            let mut pairs = Vec::new();
            for _ in 0..n {
                pairs.push((c.key()?, c.vector(MAX_VALUE_LEN, "value")?));
            }
            Request::MultiSet { pairs }
        }
        q::CANCEL_WAIT => Request::CancelWait,
        q::QUEUE_PUSH => Request::QueuePush {
            key: c.key()?,
            value: c.vector(MAX_VALUE_LEN, "value")?,
        },
        q::QUEUE_POP => Request::QueuePop { key: c.key()? },
        q::QUEUE_LEN => Request::QueueLen { key: c.key()? },
        q::LIST_KEYS => Request::ListKeys,
        q::BARRIER => Request::Barrier {
            key: c.key()?,
            world_size: c.i64()?,
        },
        other => {
            return Err(Stop::Bad(DecodeError::new(format!(
                "unknown query type {other} (torch 2.15 knows 0..=18)"
            ))))
        }
    })
}

/// Little-endian writer of torch's fields.
#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn vector(&mut self, v: &[u8]) -> &mut Self {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
        self
    }
}

fn check(len: usize, max: usize, what: &str) -> Result<(), DecodeError> {
    if len > max {
        return Err(DecodeError::new(format!(
            "{what} of {len} exceeds the limit of {max}"
        )));
    }
    Ok(())
}

/// Encodes a query, checking the limits the server checks, so a client learns of a key that is
/// too long before anything is sent.
pub fn encode_request(req: &Request<'_>) -> Result<Vec<u8>, DecodeError> {
    use query as q;
    let mut w = Writer::default();
    let key = |w: &mut Writer, k: &str| -> Result<(), DecodeError> {
        check(k.len(), MAX_KEY_LEN, "key bytes")?;
        w.vector(k.as_bytes());
        Ok(())
    };
    let value = |w: &mut Writer, v: &[u8]| -> Result<(), DecodeError> {
        check(v.len(), MAX_VALUE_LEN, "value bytes")?;
        w.vector(v);
        Ok(())
    };
    let keys = |w: &mut Writer, ks: &[&str]| -> Result<(), DecodeError> {
        check(ks.len(), MAX_KEYS, "key count")?;
        w.u64(ks.len() as u64);
        ks.iter().try_for_each(|k| key(w, k))
    };
    match req {
        Request::Validate { magic } => {
            w.u8(q::VALIDATE).u32(*magic);
        }
        Request::Ping { nonce } => {
            w.u8(q::PING).u32(*nonce);
        }
        Request::Set { key: k, value: v } => {
            key(w.u8(q::SET), k)?;
            value(&mut w, v)?;
        }
        Request::CompareSet {
            key: k,
            expected,
            desired,
        } => {
            key(w.u8(q::COMPARE_SET), k)?;
            value(&mut w, expected)?;
            value(&mut w, desired)?;
        }
        Request::Get { key: k } => key(w.u8(q::GET), k)?,
        Request::Add { key: k, delta } => {
            key(w.u8(q::ADD), k)?;
            w.i64(*delta);
        }
        Request::Check { keys: ks } => keys(w.u8(q::CHECK), ks)?,
        Request::Wait { keys: ks } => keys(w.u8(q::WAIT), ks)?,
        Request::NumKeys => {
            w.u8(q::GET_NUM_KEYS);
        }
        Request::DeleteKey { key: k } => key(w.u8(q::DELETE_KEY), k)?,
        Request::Append { key: k, value: v } => {
            key(w.u8(q::APPEND), k)?;
            value(&mut w, v)?;
        }
        Request::MultiGet { keys: ks } => keys(w.u8(q::MULTI_GET), ks)?,
        Request::MultiSet { pairs } => {
            check(pairs.len(), MAX_KEYS, "key count")?;
            w.u8(q::MULTI_SET).u64(pairs.len() as u64);
            for (k, v) in pairs {
                key(&mut w, k)?;
                value(&mut w, v)?;
            }
        }
        Request::CancelWait => {
            w.u8(q::CANCEL_WAIT);
        }
        Request::QueuePush { key: k, value: v } => {
            key(w.u8(q::QUEUE_PUSH), k)?;
            value(&mut w, v)?;
        }
        Request::QueuePop { key: k } => key(w.u8(q::QUEUE_POP), k)?,
        Request::QueueLen { key: k } => key(w.u8(q::QUEUE_LEN), k)?,
        Request::ListKeys => {
            w.u8(q::LIST_KEYS);
        }
        Request::Barrier { key: k, world_size } => {
            key(w.u8(q::BARRIER), k)?;
            w.i64(*world_size);
        }
    }
    Ok(w.0)
}

/// Encodes a reply. Replies carry values the server already holds, within the limits.
pub fn encode_reply(reply: &Reply<'_>) -> Vec<u8> {
    let mut w = Writer::default();
    match reply {
        Reply::Nonce(n) => {
            w.u32(*n);
        }
        Reply::Value(v) => {
            w.vector(v);
        }
        Reply::Int(i) => {
            w.i64(*i);
        }
        Reply::Status(s) => {
            w.u8(*s);
        }
        Reply::Values(vs) => vs.iter().for_each(|v| {
            w.vector(v);
        }),
        Reply::Popped { len, head } => {
            w.i64(*len);
            if let Some(v) = head {
                w.vector(v);
            }
        }
        Reply::Keys(ks) => {
            w.i64(ks.len() as i64);
            ks.iter().for_each(|k| {
                w.vector(k.as_bytes());
            });
        }
    }
    w.0
}

/// Decodes a reply of `kind` at the start of `buf`, like [`decode_request`].
pub fn decode_reply(
    kind: ReplyKind,
    buf: &[u8],
) -> Result<Option<(Reply<'_>, usize)>, DecodeError> {
    let mut c = Cursor { buf, at: 0 };
    let r = read_reply(kind, &mut c);
    finish(r, c.at)
}

fn read_reply<'a>(kind: ReplyKind, c: &mut Cursor<'a>) -> Result<Reply<'a>, Stop> {
    Ok(match kind {
        ReplyKind::Nonce => Reply::Nonce(c.u32()?),
        ReplyKind::Value => Reply::Value(c.vector(MAX_VALUE_LEN, "value")?),
        ReplyKind::Int => Reply::Int(c.i64()?),
        ReplyKind::Status => Reply::Status(c.u8()?),
        ReplyKind::Values(n) => {
            let mut vs = Vec::new();
            for _ in 0..n {
                vs.push(c.vector(MAX_VALUE_LEN, "value")?);
            }
            Reply::Values(vs)
        }
        ReplyKind::Popped => match c.i64()? {
            0 => Reply::Popped { len: 0, head: None },
            len if len > 0 => Reply::Popped {
                len,
                head: Some(c.vector(MAX_VALUE_LEN, "queue element")?),
            },
            n => return Err(Stop::Bad(DecodeError::new(format!("queue length {n} < 0")))),
        },
        ReplyKind::Keys => {
            let n = c.i64()?;
            let n = usize::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_KEYS)
                .ok_or_else(|| DecodeError::new(format!("key count {n} outside 0..={MAX_KEYS}")))?;
            let mut ks = Vec::new();
            for _ in 0..n {
                ks.push(c.key()?);
            }
            Reply::Keys(ks)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes captured from torch 2.15's client (`torch.distributed.TCPStore`, key prefix "/")
    /// and its libuv server, through a logging proxy.
    #[test]
    fn torch_bytes_decode() {
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let cases: &[(&str, Request<'_>)] = &[
            ("00cef7853c", Request::Validate { magic: VALIDATION_MAGIC }),
            ("0dd6710000", Request::Ping { nonce: 0x71d6 }),
            (
                "0102000000000000002f6b02000000000000007631",
                Request::Set { key: "/k", value: b"v1" },
            ),
            (
                "06010000000000000002000000000000002f6b",
                Request::Wait { keys: vec!["/k"] },
            ),
            (
                "0402000000000000002f6e0500000000000000",
                Request::Add { key: "/n", delta: 5 },
            ),
            (
                "0b020000000000000002000000000000002f6101000000000000003102000000000000002f62010000000000000032",
                Request::MultiSet { pairs: vec![("/a", b"1"), ("/b", b"2")] },
            ),
            ("0c", Request::CancelWait),
            ("11", Request::ListKeys),
            (
                "1203000000000000002f626b0100000000000000",
                Request::Barrier { key: "/bk", world_size: 1 },
            ),
        ];
        for (h, want) in cases {
            let bytes = hex(h);
            let (got, used) = decode_request(&bytes).unwrap().unwrap();
            assert_eq!((&got, used), (want, bytes.len()), "{h}");
            assert_eq!(encode_request(want).unwrap(), bytes, "{h}");
            for cut in 0..bytes.len() {
                assert_eq!(
                    decode_request(&bytes[..cut]).unwrap(),
                    None,
                    "{h} cut at {cut}"
                );
            }
        }
        let popped = hex("010000000000000002000000000000006531");
        assert_eq!(
            decode_reply(ReplyKind::Popped, &popped).unwrap(),
            Some((
                Reply::Popped {
                    len: 1,
                    head: Some(b"e1")
                },
                popped.len()
            ))
        );
        let keys = hex("010000000000000002000000000000002f6b");
        assert_eq!(
            decode_reply(ReplyKind::Keys, &keys).unwrap(),
            Some((Reply::Keys(vec!["/k"]), keys.len()))
        );
        assert_eq!(encode_reply(&Reply::Keys(vec!["/k"])), keys);
    }

    #[test]
    fn lies_are_refused_before_waiting() {
        let mut huge = vec![query::SET];
        huge.extend_from_slice(&(u64::MAX).to_le_bytes());
        let e = decode_request(&huge).unwrap_err();
        assert!(e.reason().contains("key of"), "{e}");
        let mut many = vec![query::WAIT];
        many.extend_from_slice(&((MAX_KEYS as u64) + 1).to_le_bytes());
        assert!(decode_request(&many)
            .unwrap_err()
            .reason()
            .contains("key count"));
        assert!(decode_request(&[200])
            .unwrap_err()
            .reason()
            .contains("unknown query type 200"));
    }
}
