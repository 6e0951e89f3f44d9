//! One PyTorch TCPStore client: `torch.distributed.TCPStore` (and so `init_process_group`'s
//! `env://` rendezvous, Gloo's and NCCL's bootstrap) served from the same port as phalanx's
//! own protocol. See Note [Two protocols on one port].
//!
//! PyTorch's clients live in their own table: they cannot authenticate, so they never see or
//! touch the keys of phalanx's control plane (agents' heartbeats, failure reports).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::TorchClients;
use super::shared::{Admitted, Shared};
use crate::io_util::{peek_peer, read_exact_by, Peer};
use crate::table::WaitError;
use crate::wire;
use crate::wire::torch::{self, Reply, Request};
use crate::wire::MAX_FRAME_LEN;

/// How often a pending `wait`/`barrier` checks for `CANCEL_WAIT`, a vanished client and a
/// stopping server (it also wakes on every change to a key it waits for).
const CANCEL_CHECK: Duration = Duration::from_millis(50);
/// A client that stops reading replies for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Receive buffer capacity kept between queries.
const KEEP_CAPACITY: usize = 1 << 20;

/// Takes a PyTorch client off the event loop: its protocol's `wait` and `barrier` block a
/// thread, and PyTorch clients are few (one per worker process at most), so each gets a thread
/// of its own, with the blocking code below. `admitted` is its place under the connection cap,
/// held until the thread ends.
pub(super) fn hand_over(
    shared: &Arc<Shared>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    admitted: Admitted,
) {
    let local = stream.local_addr().ok();
    let refusal = torch_refusal(shared.config.torch_clients, peer, local);
    let stream = match stream.into_std().and_then(|s| {
        s.set_nonblocking(false)?;
        Ok(s)
    }) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(peer = %peer, error = %e, "store: cannot take a PyTorch client off the event loop");
            return;
        }
    };
    shared.spawn_thread(stream, peer, move |shared, stream| {
        let _admitted = admitted;
        match refusal {
            None => serve(shared, stream, peer),
            Some(why) => refuse_torch(shared, stream, peer, &why),
        }
    });
}

/// Why a PyTorch client from `peer` (connected to our address `local`) is not served under
/// `policy`, `None` when it is. "This host" is loopback or the address it connected to (a
/// worker of node 0 that dials node 0's own interface address).
fn torch_refusal(
    policy: TorchClients,
    peer: SocketAddr,
    local: Option<SocketAddr>,
) -> Option<String> {
    let open = "PyTorch's store protocol has no authentication";
    let ip = peer.ip().to_canonical();
    let same_host = ip.is_loopback() || local.is_some_and(|l| l.ip().to_canonical() == ip);
    match policy {
        TorchClients::Anyone => None,
        TorchClients::Loopback if same_host => None,
        TorchClients::Loopback => Some(format!(
            "{open}, so this store serves it only to clients on its own host, and a PyTorch \
             client connected from {peer}; to serve PyTorch workers on other hosts, pass \
             --torch-store to `phalanx launch` (or set PET_TORCH_STORE=1) on a network you trust"
        )),
        TorchClients::Refuse => Some(format!("{open}; this store does not serve it")),
    }
}

/// Refuses a PyTorch client, once it has proved to be one (VALIDATE and its magic, so a stray
/// zero byte is not taken for one). PyTorch retries a refused connection until its own
/// timeout: the first refusal is logged and left where the launcher looks
/// (`keys::TORCH_REFUSED`), later ones only at debug level.
fn refuse_torch(shared: &Shared, stream: &TcpStream, peer: SocketAddr, why: &str) {
    let deadline = Instant::now() + shared.config.handshake_timeout;
    let mut hello = [0u8; 5];
    if read_exact_by(stream, &mut hello, deadline).is_err()
        || !matches!(
            wire::torch::decode_request(&hello),
            Ok(Some((wire::torch::Request::Validate { magic }, 5))) if magic == wire::torch::VALIDATION_MAGIC
        )
    {
        tracing::debug!(peer = %peer, "store: closed a connection that began with a zero byte");
        return;
    }
    let key = crate::keys::TORCH_REFUSED;
    if shared.table.compare_set(key, b"", why.as_bytes()) == why.as_bytes() {
        tracing::warn!(peer = %peer, "store: refused a PyTorch TCPStore client: {why}");
    } else {
        tracing::debug!(peer = %peer, "store: refused a PyTorch TCPStore client again");
    }
}

/// Serves one torch client to completion; every failure ends this connection only.
pub(super) fn serve(shared: &Shared, stream: &TcpStream, peer: SocketAddr) {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    // The first query must be VALIDATE, within the handshake timeout like phalanx's clients.
    let deadline = Instant::now() + shared.config.handshake_timeout;
    let mut buf: Vec<u8> = Vec::new();
    let mut validated = false;
    // A wait ended by the client's next bytes: they must be its CANCEL_WAIT.
    let mut cancelling = false;
    loop {
        let (used, outcome) = match torch::decode_request(&buf) {
            Ok(Some((req, used))) => {
                let pending = buf.len() > used;
                let outcome = if cancelling && req != Request::CancelWait {
                    Outcome::Drop(format!(
                        "sent {} while a wait was pending (only cancel_wait may follow)",
                        req.name()
                    ))
                } else if validated {
                    cancelling = false;
                    execute(shared, &req, stream, pending)
                } else {
                    match req {
                        Request::Validate { magic } if magic == torch::VALIDATION_MAGIC => {
                            validated = true;
                            let _ = stream.set_read_timeout(None);
                            Outcome::Next
                        }
                        other => Outcome::Drop(format!(
                            "first query was {} instead of validate with magic {:#x}",
                            other.name(),
                            torch::VALIDATION_MAGIC
                        )),
                    }
                };
                (used, outcome)
            }
            Ok(None) => {
                if !fill(
                    &mut buf,
                    stream,
                    (!validated).then_some(deadline),
                    shared,
                    peer,
                ) {
                    return;
                }
                continue;
            }
            Err(e) => (0, Outcome::Drop(format!("malformed query: {e}"))),
        };
        match outcome {
            Outcome::Next => {
                buf.drain(..used);
                // A large query's buffer is not kept for the connection's lifetime.
                if buf.capacity() > KEEP_CAPACITY && buf.len() <= KEEP_CAPACITY {
                    buf.shrink_to(KEEP_CAPACITY);
                }
            }
            Outcome::Cancelling => {
                buf.drain(..used);
                cancelling = true;
            }
            Outcome::Gone => return,
            Outcome::Drop(why) => {
                tracing::warn!(peer = %peer, "store: PyTorch client dropped: {why}");
                return;
            }
        }
    }
}

/// Reads more bytes into `buf`; `false` when the connection is over.
fn fill(
    buf: &mut Vec<u8>,
    mut stream: &TcpStream,
    deadline: Option<Instant>,
    shared: &Shared,
    peer: SocketAddr,
) -> bool {
    // A query is at most the frame limit of phalanx's own protocol: a client announcing more
    // (many 64 MiB values in one multi_set) is dropped before its bytes pile up.
    if buf.len() > MAX_FRAME_LEN {
        tracing::warn!(peer = %peer, "store: PyTorch client dropped: a query over {MAX_FRAME_LEN} bytes");
        return false;
    }
    if let Some(d) = deadline {
        let left = d.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            tracing::warn!(peer = %peer, "store: PyTorch client did not validate within {:?}", shared.config.handshake_timeout);
            return false;
        }
    }
    let mut chunk = [0u8; 64 * 1024];
    loop {
        return match stream.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                if !shared.stopping.load(Ordering::SeqCst) {
                    tracing::debug!(peer = %peer, error = %e, "store: PyTorch client lost");
                }
                false
            }
        };
    }
}

enum Outcome {
    /// Answered (or nothing to answer); read the next query.
    Next,
    /// A wait ended without a reply because the client sent more: its CANCEL_WAIT, next.
    Cancelling,
    /// The client left, or the server is stopping.
    Gone,
    /// A protocol violation; the reason is logged.
    Drop(String),
}

/// Runs one query against the PyTorch table and sends its reply. `pending`: more bytes of the
/// client already sit in the buffer (a wait then ends at once unless already satisfied).
fn execute(shared: &Shared, req: &Request<'_>, mut stream: &TcpStream, pending: bool) -> Outcome {
    let t = &shared.torch_table;
    shared.traffic.requests.fetch_add(1, Ordering::Relaxed);
    let mut seen = Peer::Quiet;
    let mut cancel = || {
        seen = if pending {
            Peer::Sent
        } else {
            if shared.stopping.load(Ordering::SeqCst) {
                Peer::Gone
            } else {
                peek_peer(stream)
            }
        };
        seen != Peer::Quiet
    };
    let value;
    let values: Vec<Vec<u8>>;
    let keys: Vec<String>;
    let reply = match req {
        Request::Validate { .. } => {
            return Outcome::Drop("validate sent twice".into());
        }
        Request::Ping { nonce } => Some(Reply::Nonce(*nonce)),
        Request::Set { key, value } => {
            t.set(key, value);
            None
        }
        Request::CompareSet {
            key,
            expected,
            desired,
        } => {
            value = t.compare_set(key, expected, desired);
            Some(Reply::Value(&value))
        }
        Request::Get { key } => {
            value = t.get_now(key).unwrap_or_default();
            Some(Reply::Value(&value))
        }
        Request::Add { key, delta } => match t.add(key, *delta) {
            Ok(n) => Some(Reply::Int(n)),
            Err(e) => return Outcome::Drop(e.to_string()),
        },
        Request::Check { keys } => Some(Reply::Status(if t.check_or_queued(keys) {
            torch::STOP_WAITING
        } else {
            torch::WAIT_CANCELED
        })),
        Request::Wait { keys } => {
            let r = t.wait_present_or_queued(keys, CANCEL_CHECK, &mut cancel);
            match after_wait(r, seen) {
                Ok(reply) => Some(reply),
                Err(o) => return o,
            }
        }
        Request::NumKeys => Some(Reply::Int(t.num_keys())),
        Request::DeleteKey { key } => Some(Reply::Int(i64::from(t.delete(key)))),
        Request::Append { key, value } => match t.append(key, value) {
            Ok(()) => None,
            Err(e) => return Outcome::Drop(e.to_string()),
        },
        Request::MultiGet { keys } => {
            // A small query naming one large value many times must not make a huge reply.
            let mut total = 0usize;
            let mut got = Vec::with_capacity(keys.len().min(1024));
            for k in keys {
                let v = t.get_now(k).unwrap_or_default();
                total += v.len();
                if total > MAX_FRAME_LEN {
                    return Outcome::Drop(format!(
                        "multi_get of {} keys would answer more than {MAX_FRAME_LEN} bytes",
                        keys.len()
                    ));
                }
                got.push(v);
            }
            values = got;
            Some(Reply::Values(values.iter().map(Vec::as_slice).collect()))
        }
        Request::MultiSet { pairs } => {
            t.multi_set(pairs);
            None
        }
        Request::CancelWait => Some(Reply::Status(torch::WAIT_CANCELED)),
        Request::QueuePush { key, value } => {
            t.queue_push(key, value);
            None
        }
        Request::QueuePop { key } => {
            let (len, head) = t.queue_pop(key);
            value = head.unwrap_or_default();
            Some(Reply::Popped {
                len,
                head: (len > 0).then_some(value.as_slice()),
            })
        }
        Request::QueueLen { key } => Some(Reply::Int(t.queue_len(key))),
        Request::ListKeys => {
            keys = t.list_keys();
            Some(Reply::Keys(keys.iter().map(String::as_str).collect()))
        }
        Request::Barrier { key, world_size } => {
            if let Err(e) = t.add(key, 1) {
                return Outcome::Drop(e.to_string());
            }
            let r = t.wait_count(key, *world_size, CANCEL_CHECK, &mut cancel);
            match after_wait(r, seen) {
                Ok(reply) => Some(reply),
                Err(o) => {
                    // This client no longer waits there: a retry must not count twice.
                    let _ = t.add(key, -1);
                    return o;
                }
            }
        }
    };
    let Some(reply) = reply else {
        return Outcome::Next;
    };
    let bytes = torch::encode_reply(&reply);
    shared
        .traffic
        .bytes_out
        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    match stream.write_all(&bytes) {
        Ok(()) => Outcome::Next,
        Err(_) => Outcome::Gone,
    }
}

/// The reply to a finished `wait`/`barrier`: `STOP_WAITING`; or, when the client sent more
/// (its `CANCEL_WAIT`, which gets the reply), nothing and [`Outcome::Cancelling`]; or the end
/// of the connection.
fn after_wait(r: Result<(), WaitError>, seen: Peer) -> Result<Reply<'static>, Outcome> {
    match (r, seen) {
        (Ok(()), _) => Ok(Reply::Status(torch::STOP_WAITING)),
        (Err(_), Peer::Sent) => Err(Outcome::Cancelling),
        (Err(_), _) => Err(Outcome::Gone),
    }
}
