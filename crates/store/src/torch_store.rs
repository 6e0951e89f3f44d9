//! `TorchStore`: a client of PyTorch's TCPStore (torchrun's agent store, or any
//! `torch.distributed.TCPStore(is_master=True)`), so that phalanx's ranks rendezvous through it
//! when torchrun starts them.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::wire::torch::{self, Reply, ReplyKind, Request};
use crate::{Error, Result, Store};

/// How long the server has to echo the first ping, and to confirm a cancelled wait.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to a PyTorch TCPStore. PyTorch's protocol has no authentication: use it only
/// with the store of the launcher that started this process (torchrun sets
/// `TORCHELASTIC_USE_AGENT_STORE=True`). Thread-safe like [`crate::TcpStore`]: calls are
/// serialised on one connection.
///
/// ```no_run
/// use std::time::Duration;
/// use phalanx_store::{Store, TorchStore};
/// // torchrun's MASTER_ADDR:MASTER_PORT
/// let store = TorchStore::connect("127.0.0.1:29500", Duration::from_secs(30)).unwrap();
/// store.set("/phalanx/rank0", b"10.0.0.1:4000").unwrap();
/// ```
pub struct TorchStore {
    addr: String,
    connect_timeout: Duration,
    /// `None` after an I/O error or timeout left the stream out of step; the next call reconnects.
    conn: Mutex<Option<Conn>>,
    timeout: Mutex<Duration>,
}

impl std::fmt::Debug for TorchStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TorchStore")
            .field("addr", &self.addr)
            .finish()
    }
}

struct Conn {
    stream: TcpStream,
    /// Bytes read past the last reply (a reply can arrive in pieces).
    buf: Vec<u8>,
}

/// What a read with a deadline found.
enum Got<T> {
    Reply(T),
    TimedOut,
}

impl TorchStore {
    /// Connects to `addr` (`host:port`), retrying until `timeout` like [`crate::TcpStore`],
    /// and checks that a PyTorch store answers (`VALIDATE`, then a `PING` it must echo).
    /// `timeout` is also the store timeout of blocking calls.
    pub fn connect(addr: &str, timeout: Duration) -> Result<TorchStore> {
        let conn = Self::open(addr, timeout)?;
        Ok(TorchStore {
            addr: addr.to_string(),
            connect_timeout: timeout,
            conn: Mutex::new(Some(conn)),
            timeout: Mutex::new(timeout),
        })
    }

    fn open(addr: &str, timeout: Duration) -> Result<Conn> {
        let stream = crate::io_util::connect(addr, timeout)?;
        let mut conn = Conn {
            stream,
            buf: Vec::new(),
        };
        let nonce = phalanx_core::job_proof::nonce();
        let nonce = u32::from_le_bytes(nonce[..4].try_into().expect("a nonce has 4+ bytes"));
        let hello = [
            torch::encode_request(&Request::Validate {
                magic: torch::VALIDATION_MAGIC,
            })
            .expect("a fixed-size query"),
            torch::encode_request(&Request::Ping { nonce }).expect("a fixed-size query"),
        ]
        .concat();
        let wait = timeout.min(REPLY_TIMEOUT);
        let deadline = Instant::now() + wait;
        let echoed = conn
            .stream
            .write_all(&hello)
            .map_err(|source| io_error(addr, "handshake", source))
            .and_then(|()| {
                conn.receive(
                    addr,
                    "handshake",
                    ReplyKind::Nonce,
                    Some(deadline),
                    |r| matches!(r, Reply::Nonce(n) if n == nonce),
                )
            })?;
        match echoed {
            Got::Reply(true) => Ok(conn),
            Got::Reply(false) => Err(Error::Protocol {
                addr: addr.into(),
                reason: "the store did not echo the ping: not a PyTorch TCPStore".into(),
            }),
            Got::TimedOut => Err(Error::Protocol {
                addr: addr.into(),
                reason: format!(
                    "no answer to PyTorch's ping within {wait:?}: not a PyTorch TCPStore \
                     (a phalanx store needs PHALANX_TOKEN, which `phalanx launch` sets)"
                ),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Conn>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the connection (opened again if a failure closed it); a failure closes it,
    /// since the stream may be out of step.
    fn with_conn<T>(&self, f: impl FnOnce(&mut Conn) -> Result<T>) -> Result<T> {
        let mut guard = self.lock();
        let conn = match guard.as_mut() {
            Some(c) => c,
            None => guard.insert(Self::open(&self.addr, self.connect_timeout)?),
        };
        let r = f(conn);
        if r.is_err() {
            *guard = None;
        }
        r
    }

    /// Sends `req` and decodes its reply with `take` (no reply expected: `take` is not called).
    fn call<T>(
        &self,
        req: &Request<'_>,
        take: impl FnOnce(Reply<'_>) -> Option<T>,
    ) -> Result<Option<T>> {
        let op = req.name();
        let bytes = torch::encode_request(req).map_err(|e| Error::Invalid {
            reason: format!("{op}: {e}"),
        })?;
        let addr = self.addr.as_str();
        let deadline = Instant::now() + self.timeout().max(REPLY_TIMEOUT);
        self.with_conn(|c| {
            c.stream
                .write_all(&bytes)
                .map_err(|source| io_error(addr, op, source))?;
            let Some(kind) = req.reply_kind() else {
                return Ok(None);
            };
            match c.receive(addr, op, kind, Some(deadline), take)? {
                Got::Reply(Some(v)) => Ok(Some(v)),
                Got::Reply(None) => Err(Error::Protocol {
                    addr: addr.into(),
                    reason: format!("unexpected reply to {op}"),
                }),
                Got::TimedOut => Err(io_error(addr, op, io::ErrorKind::TimedOut.into())),
            }
        })
    }

    fn reply<T>(&self, req: &Request<'_>, take: impl FnOnce(Reply<'_>) -> Option<T>) -> Result<T> {
        self.call(req, take)?.ok_or_else(|| Error::Protocol {
            addr: self.addr.clone(),
            reason: format!("{} has no reply", req.name()),
        })
    }

    /// The first of `keys` still missing (for a timeout's message).
    fn first_missing<'k>(&self, keys: &[&'k str]) -> &'k str {
        keys.iter()
            .copied()
            .find(|k| !self.check(&[k]).unwrap_or(false))
            .or_else(|| keys.first().copied())
            .unwrap_or_default()
    }
}

impl Conn {
    /// Reads one reply of `kind` by `deadline` and hands it to `take`.
    fn receive<T>(
        &mut self,
        addr: &str,
        op: &'static str,
        kind: ReplyKind,
        deadline: Option<Instant>,
        take: impl FnOnce(Reply<'_>) -> T,
    ) -> Result<Got<T>> {
        loop {
            match torch::decode_reply(kind, &self.buf) {
                Ok(Some((reply, used))) => {
                    let v = take(reply);
                    self.buf.drain(..used);
                    return Ok(Got::Reply(v));
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(Error::Protocol {
                        addr: addr.into(),
                        reason: format!("{op} reply: {e}"),
                    })
                }
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => Some(l),
                    _ => return Ok(Got::TimedOut),
                },
                None => None,
            };
            self.stream
                .set_read_timeout(left)
                .map_err(|source| io_error(addr, op, source))?;
            let mut chunk = [0u8; 64 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(io_error(
                        addr,
                        op,
                        io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the store closed the connection",
                        ),
                    ))
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(Got::TimedOut)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(addr, op, e)),
            }
        }
    }
}

fn io_error(addr: &str, op: &'static str, source: io::Error) -> Error {
    Error::Io {
        addr: addr.to_string(),
        op,
        source,
    }
}

fn status(r: Reply<'_>) -> Option<u8> {
    match r {
        Reply::Status(s) => Some(s),
        _ => None,
    }
}

impl Store for TorchStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.call(&Request::Set { key, value }, |_| Some(()))
            .map(drop)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        // PyTorch's own client does the same: GET answers at once, so wait for the key first.
        self.wait(&[key])?;
        self.reply(&Request::Get { key }, |r| match r {
            Reply::Value(v) => Some(v.to_vec()),
            _ => None,
        })
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.reply(&Request::Add { key, delta }, |r| match r {
            Reply::Int(i) => Some(i),
            _ => None,
        })
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let req = Request::CompareSet {
            key,
            expected,
            desired,
        };
        self.reply(&req, |r| match r {
            Reply::Value(v) => Some(v.to_vec()),
            _ => None,
        })
    }
    fn wait_timeout(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let req = Request::Wait {
            keys: keys.to_vec(),
        };
        let bytes = torch::encode_request(&req).map_err(|e| Error::Invalid {
            reason: format!("wait: {e}"),
        })?;
        let cancel = torch::encode_request(&Request::CancelWait).expect("a one-byte query");
        let addr = self.addr.as_str();
        let done = self.with_conn(|c| {
            c.stream
                .write_all(&bytes)
                .map_err(|source| io_error(addr, "wait", source))?;
            let deadline = Instant::now() + timeout;
            if let Got::Reply(s) =
                c.receive(addr, "wait", ReplyKind::Status, Some(deadline), status)?
            {
                return Ok(s == Some(torch::STOP_WAITING));
            }
            // PyTorch's cancellation: CANCEL_WAIT always gets WAIT_CANCELED, possibly after a
            // STOP_WAITING that crossed it on the wire.
            c.stream
                .write_all(&cancel)
                .map_err(|source| io_error(addr, "wait", source))?;
            let by = Some(Instant::now() + REPLY_TIMEOUT);
            let mut s = c.receive(addr, "wait", ReplyKind::Status, by, status)?;
            // The keys arrived just as we gave up: the wait succeeded after all.
            let crossed = matches!(s, Got::Reply(Some(torch::STOP_WAITING)));
            if crossed {
                s = c.receive(addr, "wait", ReplyKind::Status, by, status)?;
            }
            match s {
                Got::Reply(Some(torch::WAIT_CANCELED)) => Ok(crossed),
                _ => Err(Error::Protocol {
                    addr: addr.into(),
                    reason: "no WAIT_CANCELED after CANCEL_WAIT".into(),
                }),
            }
        })?;
        if done {
            Ok(())
        } else {
            Err(Error::Timeout {
                key: self.first_missing(keys).to_string(),
                after: timeout,
            })
        }
    }
    fn check(&self, keys: &[&str]) -> Result<bool> {
        let req = Request::Check {
            keys: keys.to_vec(),
        };
        self.reply(&req, status).map(|s| s == torch::STOP_WAITING)
    }
    fn delete_key(&self, key: &str) -> Result<bool> {
        self.reply(&Request::DeleteKey { key }, |r| match r {
            Reply::Int(n) => Some(n > 0),
            _ => None,
        })
    }
    fn num_keys(&self) -> Result<i64> {
        self.reply(&Request::NumKeys, |r| match r {
            Reply::Int(n) => Some(n),
            _ => None,
        })
    }
    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        self.call(&Request::Append { key, value }, |_| Some(()))
            .map(drop)
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        self.wait(keys)?;
        let req = Request::MultiGet {
            keys: keys.to_vec(),
        };
        self.reply(&req, |r| match r {
            Reply::Values(vs) => Some(vs.into_iter().map(<[u8]>::to_vec).collect()),
            _ => None,
        })
    }
    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        let pairs = crate::prefix_store::zip_pairs(keys, values)?;
        self.call(&Request::MultiSet { pairs }, |_| Some(()))
            .map(drop)
    }
    fn timeout(&self) -> Duration {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn set_timeout(&self, t: Duration) {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }
}
