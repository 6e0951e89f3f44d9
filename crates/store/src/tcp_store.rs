//! `TcpStore`: the client of [`crate::StoreServer`].

use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::io_util::{read_exact_by, read_frame, FrameRead};
use crate::wire::{
    self, ClientHandshake, Rejection, Request, Response, CLIENT_HELLO_HEADER_LEN, SERVER_HELLO_LEN,
    VERDICT_LEN,
};
use crate::{store::Claim, Auth, Error, Result, Store};

/// How long the client gives the server to answer the handshake once connected.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Extra time a client waits past a blocking request's own timeout before deciding the server
/// is gone (the server answers `Timeout` itself when the wait runs out).
const REPLY_GRACE: Duration = Duration::from_secs(5);

/// A connection to a [`crate::StoreServer`]. Thread-safe: calls are serialised on an internal
/// mutex, so a thread blocked in `get` holds the connection; give watcher threads their own
/// with [`TcpStore::try_clone`].
///
/// ```
/// use std::time::Duration;
/// use phalanx_store::{Auth, Store, StoreServer, TcpStore};
/// let auth = Auth::random("doc");
/// let server = StoreServer::bind("127.0.0.1:0".parse().unwrap(), auth.clone()).unwrap();
/// let addr = server.local_addr().to_string();
/// let store = TcpStore::connect(&addr, &auth, Duration::from_secs(5)).unwrap();
/// store.set("master", b"10.0.0.1:29500").unwrap();
/// assert_eq!(store.add("arrived", 1).unwrap(), 1);
/// assert_eq!(store.get("master").unwrap(), b"10.0.0.1:29500");
/// ```
pub struct TcpStore {
    addr: String,
    auth: Auth,
    connect_timeout: Duration,
    /// `None` after an I/O error or timeout left the stream out of step; the next call reconnects.
    conn: Mutex<Option<Conn>>,
    timeout: Mutex<Duration>,
}

/// The open connection, and the read timeout its socket has now (set only when it changes: a
/// system call saved on most calls).
struct Conn {
    stream: TcpStream,
    read_timeout: Option<Duration>,
}

impl Conn {
    fn new(stream: TcpStream) -> Conn {
        Conn {
            stream,
            read_timeout: None,
        }
    }
}

impl std::fmt::Debug for TcpStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStore")
            .field("addr", &self.addr)
            .field("auth", &self.auth)
            .finish()
    }
}

fn rejection(addr: &str, r: Rejection) -> Error {
    if r.auth {
        Error::Auth {
            addr: addr.to_string(),
            reason: r.reason,
        }
    } else {
        Error::Protocol {
            addr: addr.to_string(),
            reason: r.reason,
        }
    }
}

impl TcpStore {
    /// Connects to `addr` (`host:port`) and authenticates with `auth`. A refused or unreachable
    /// address is retried with backoff (10 ms doubling to 1 s) until `timeout`, which is also
    /// the store timeout of blocking calls.
    pub fn connect(addr: &str, auth: &Auth, timeout: Duration) -> Result<TcpStore> {
        let stream = Self::open(addr, auth, timeout)?;
        Ok(TcpStore {
            addr: addr.to_string(),
            auth: auth.clone(),
            connect_timeout: timeout,
            conn: Mutex::new(Some(Conn::new(stream))),
            timeout: Mutex::new(timeout),
        })
    }

    /// A second, independent connection to the same store (for watcher threads).
    pub fn try_clone(&self) -> Result<TcpStore> {
        let clone = Self::connect(&self.addr, &self.auth, self.connect_timeout)?;
        clone.set_timeout(self.timeout());
        Ok(clone)
    }

    /// The address this client connects to, as given.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn open(addr: &str, auth: &Auth, timeout: Duration) -> Result<TcpStream> {
        let mut stream = crate::io_util::connect(addr, timeout)?;
        Self::handshake(&mut stream, addr, auth)?;
        Ok(stream)
    }

    fn handshake(stream: &mut TcpStream, addr: &str, auth: &Auth) -> Result<()> {
        let io_err = |source| Error::Io {
            addr: addr.to_string(),
            op: "handshake",
            source,
        };
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        let hs = ClientHandshake::new(auth, phalanx_core::job_proof::nonce());
        let hello = hs.hello().map_err(|e| Error::Invalid {
            reason: e.to_string(),
        })?;
        debug_assert!(hello.len() >= CLIENT_HELLO_HEADER_LEN);
        stream
            .set_write_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(io_err)?;
        stream.write_all(&hello).map_err(io_err)?;
        let mut server_hello = [0u8; SERVER_HELLO_LEN];
        read_exact_by(stream, &mut server_hello, deadline).map_err(io_err)?;
        let proof = hs
            .on_server_hello(&server_hello)
            .map_err(|r| rejection(addr, r))?;
        stream.write_all(&proof).map_err(io_err)?;
        let mut verdict = [0u8; VERDICT_LEN];
        read_exact_by(stream, &mut verdict, deadline).map_err(io_err)?;
        hs.on_verdict(verdict).map_err(|r| rejection(addr, r))?;
        stream.set_write_timeout(None).map_err(io_err)?;
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Option<Conn>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends one request and hands the decoded reply to `take`. `wait` is the server-side wait
    /// of a blocking request (its timeout errors name `wait_key`).
    fn call<T>(
        &self,
        req: &Request<'_>,
        wait: Option<(Duration, &str)>,
        take: impl FnOnce(Response<'_>) -> Option<T>,
    ) -> Result<T> {
        let frame = self.encode(req)?;
        let mut guard = self.lock();
        let body = self.send_and_read(&mut guard, &frame, req.op(), wait);
        drop(guard);
        self.interpret(req.op(), wait, &body?, take)
    }

    /// Sends `first` and `second` in one write and reads their replies in turn.
    ///
    /// Note [Two requests in one round trip]
    /// A rank's rendezvous is "write my key, then wait for rank 0's answer", twice (the peer
    /// table, the shared-memory vote). As two calls, each is a round trip: the rank sleeps
    /// until the reply, the server parks the connection until the next request, and both
    /// wake again. Written together, the server finds the second request waiting when it has
    /// answered the first, and the rank reads both replies: half the sleeps and wake-ups per
    /// rank, which is what a rendezvous of thousands of ranks on a few cores spends its time
    /// on. The server needs nothing new: it reads requests in order. A claim that another
    /// process holds is seen in the first reply, and then the second is not awaited.
    ///
    /// `go_on` sees the first reply's value; when it says no, the connection, which still owes
    /// the second reply, is dropped (the next call reconnects). Returns the first reply's
    /// value, and the second's if it was read.
    fn call_then(
        &self,
        first: &Request<'_>,
        second: &Request<'_>,
        wait: (Duration, &str),
        go_on: impl FnOnce(&[u8]) -> bool,
    ) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
        let mut frames = self.encode(first)?;
        frames.extend_from_slice(&self.encode(second)?);
        let value = |r: Response<'_>| match r {
            Response::Value(v) => Some(v.to_vec()),
            _ => None,
        };
        // A set's reply is Unit: an empty value.
        let first_value = |r: Response<'_>| match r {
            Response::Unit => Some(Vec::new()),
            r => value(r),
        };
        let mut guard = self.lock();
        let body = self.send_and_read(&mut guard, &frames, first.op(), None)?;
        let got = match self.interpret(first.op(), None, &body, first_value) {
            Ok(v) => v,
            Err(e) => {
                *guard = None;
                return Err(e);
            }
        };
        if !go_on(&got) {
            *guard = None;
            return Ok((got, None));
        }
        // Still the connection both requests went on: a fresh one would owe nothing.
        debug_assert!(guard.is_some());
        let body = self.send_and_read(&mut guard, &[], second.op(), Some(wait));
        drop(guard);
        let then = self.interpret(second.op(), Some(wait), &body?, value)?;
        Ok((got, Some(then)))
    }

    fn encode(&self, req: &Request<'_>) -> Result<Vec<u8>> {
        wire::encode_request(req).map_err(|e| Error::Invalid {
            reason: format!("{}: {e}", req.op()),
        })
    }

    /// Writes `frames` (may be empty: a reply already asked for) on the connection, opening it
    /// first if needed, and reads one reply's body. On failure the connection is dropped, since
    /// the stream may hold half a reply; the next call reconnects.
    fn send_and_read(
        &self,
        guard: &mut MutexGuard<'_, Option<Conn>>,
        frames: &[u8],
        op: &'static str,
        wait: Option<(Duration, &str)>,
    ) -> Result<Vec<u8>> {
        let conn = match guard.as_mut() {
            Some(c) => c,
            None => guard.insert(Conn::new(Self::open(
                &self.addr,
                &self.auth,
                self.connect_timeout,
            )?)),
        };
        let read_timeout = match wait {
            Some((w, _)) => w.saturating_add(REPLY_GRACE),
            None => self.timeout(),
        };
        let io_err = |source| Error::Io {
            addr: self.addr.clone(),
            op,
            source,
        };
        let result = (|| {
            let read_timeout = read_timeout.max(Duration::from_millis(1));
            if conn.read_timeout != Some(read_timeout) {
                conn.stream
                    .set_read_timeout(Some(read_timeout))
                    .map_err(io_err)?;
                conn.read_timeout = Some(read_timeout);
            }
            let stream = &mut conn.stream;
            if !frames.is_empty() {
                stream.write_all(frames).map_err(io_err)?;
            }
            match read_frame(stream) {
                Ok(FrameRead::Frame(body)) => Ok(body),
                Ok(FrameRead::Closed) => Err(io_err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the store closed the connection",
                ))),
                Ok(FrameRead::Malformed(e)) => Err(Error::Protocol {
                    addr: self.addr.clone(),
                    reason: format!("{op} reply: {e}"),
                }),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    match wait {
                        Some((w, key)) => Err(Error::Timeout {
                            key: key.to_string(),
                            after: w,
                        }),
                        None => Err(io_err(e)),
                    }
                }
                Err(e) => Err(io_err(e)),
            }
        })();
        if result.is_err() {
            **guard = None;
        }
        result
    }

    /// Decodes a reply's body: the store's timeouts and errors become ours, anything else goes
    /// to `take`.
    fn interpret<T>(
        &self,
        op: &'static str,
        wait: Option<(Duration, &str)>,
        body: &[u8],
        take: impl FnOnce(Response<'_>) -> Option<T>,
    ) -> Result<T> {
        let resp = wire::decode_response(body).map_err(|e| Error::Protocol {
            addr: self.addr.clone(),
            reason: format!("{op} reply: {e}"),
        })?;
        match resp {
            Response::Timeout { key } => Err(Error::Timeout {
                key: key.to_string(),
                after: wait.map_or(Duration::ZERO, |w| w.0),
            }),
            Response::Error { key, message } => Err(Error::Value {
                key: key.to_string(),
                reason: message.to_string(),
            }),
            other => match take(other) {
                Some(t) => Ok(t),
                None => {
                    // Only an unexpected reply is formatted, and only its head: a value of a
                    // few hundred KB (a process group's peer table) formatted on every call
                    // cost each rank milliseconds at 4,096 ranks, and even a format cut short
                    // walked every byte (16,384 ranks). The body is decoded again to show it.
                    let shown = wire::decode_response(body)
                        .map(|r| head_of(&r, 80))
                        .unwrap_or_default();
                    Err(Error::Protocol {
                        addr: self.addr.clone(),
                        reason: format!("unexpected reply to {op}: {shown}"),
                    })
                }
            },
        }
    }
}

/// The first `limit` bytes of `value`'s `Debug` form, formatting no further than that.
fn head_of(value: &impl std::fmt::Debug, limit: usize) -> String {
    /// A `fmt::Write` that takes `limit` bytes, then stops the formatting.
    struct Head(String, usize);
    impl std::fmt::Write for Head {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let room = self.1 - self.0.len();
            match s.len() <= room {
                true => {
                    self.0.push_str(s);
                    Ok(())
                }
                false => {
                    let cut = (0..=room)
                        .rev()
                        .find(|&i| s.is_char_boundary(i))
                        .unwrap_or(0);
                    self.0.push_str(&s[..cut]);
                    Err(std::fmt::Error)
                }
            }
        }
    }
    let mut head = Head(String::new(), limit);
    let _ = std::fmt::write(&mut head, format_args!("{value:?}"));
    head.0
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.call(&Request::Set { key, value }, None, |r| {
            matches!(r, Response::Unit).then_some(())
        })
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.get_timeout(key, self.timeout())
    }
    fn get_timeout(&self, key: &str, t: Duration) -> Result<Vec<u8>> {
        self.call(
            &Request::Get {
                key,
                timeout_ms: ms(t),
            },
            Some((t, key)),
            |r| match r {
                Response::Value(v) => Some(v.to_vec()),
                _ => None,
            },
        )
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.call(&Request::Add { key, delta }, None, |r| match r {
            Response::Int(i) => Some(i),
            _ => None,
        })
    }
    fn set_then_get(&self, key: &str, value: &[u8], then: &str, t: Duration) -> Result<Vec<u8>> {
        let (_, got) = self.call_then(
            &Request::Set { key, value },
            &Request::Get {
                key: then,
                timeout_ms: ms(t),
            },
            (t, then),
            |_| true,
        )?;
        Ok(got.expect("read on"))
    }
    fn claim_then_get(&self, key: &str, value: &[u8], then: &str, t: Duration) -> Result<Claim> {
        let (got, then_value) = self.call_then(
            &Request::CompareSet {
                key,
                expected: b"",
                desired: value,
            },
            &Request::Get {
                key: then,
                timeout_ms: ms(t),
            },
            (t, then),
            |got| got == value,
        )?;
        Ok(match then_value {
            Some(v) => Claim::Held(v),
            None => Claim::Taken(got),
        })
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        self.call(
            &Request::CompareSet {
                key,
                expected,
                desired,
            },
            None,
            |r| match r {
                Response::Value(v) => Some(v.to_vec()),
                _ => None,
            },
        )
    }
    fn wait_timeout(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let first = keys.first().copied().unwrap_or_default();
        let req = Request::Wait {
            keys: keys.to_vec(),
            timeout_ms: ms(timeout),
        };
        self.call(&req, Some((timeout, first)), |r| {
            matches!(r, Response::Unit).then_some(())
        })
    }
    fn check(&self, keys: &[&str]) -> Result<bool> {
        self.call(
            &Request::Check {
                keys: keys.to_vec(),
            },
            None,
            |r| match r {
                Response::Bool(b) => Some(b),
                _ => None,
            },
        )
    }
    fn delete_key(&self, key: &str) -> Result<bool> {
        self.call(&Request::Delete { key }, None, |r| match r {
            Response::Bool(b) => Some(b),
            _ => None,
        })
    }
    fn num_keys(&self) -> Result<i64> {
        self.call(&Request::NumKeys, None, |r| match r {
            Response::Int(i) => Some(i),
            _ => None,
        })
    }
    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        self.call(&Request::Append { key, value }, None, |r| {
            matches!(r, Response::Unit).then_some(())
        })
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        let t = self.timeout();
        let first = keys.first().copied().unwrap_or_default();
        let n = keys.len();
        self.call(
            &Request::MultiGet {
                keys: keys.to_vec(),
                timeout_ms: ms(t),
            },
            Some((t, first)),
            |r| match r {
                Response::Values(vs) if vs.len() == n => {
                    Some(vs.into_iter().map(<[u8]>::to_vec).collect())
                }
                _ => None,
            },
        )
    }
    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        let pairs = crate::prefix_store::zip_pairs(keys, values)?;
        self.call(&Request::MultiSet { pairs }, None, |r| {
            matches!(r, Response::Unit).then_some(())
        })
    }
    fn timeout(&self) -> Duration {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn set_timeout(&self, t: Duration) {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_head_of_a_reply_is_formatted() {
        let big = vec![7u8; 1 << 20];
        let head = super::head_of(&big, 80);
        assert_eq!(head.len(), 80);
        assert!(head.starts_with("[7, 7, "), "{head}");
        // Cut at a character's boundary.
        assert_eq!(super::head_of(&"é".repeat(50), 7), "\"ééé");
        assert_eq!(super::head_of(&3u8, 80), "3");
    }
}
