//! One client connection: the handshake, then requests until the client leaves.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::config::TorchClients;
use super::shared::Shared;
use crate::io_util::{peek_peer, read_exact_by, read_frame, FrameRead, Peer};
use crate::table::WaitError;
use crate::wire::{
    self, Rejection, Request, Response, ServerHandshake, CLIENT_HELLO_HEADER_LEN, CLIENT_PROOF_LEN,
};

/// How often a blocked `get`/`wait` checks that its client is still there and the server is
/// not stopping (it also wakes on every change to a key it waits for).
const LIVENESS_CHECK: Duration = Duration::from_millis(500);
/// A client that stops reading replies for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Serves one connection to completion. Every failure ends this connection only.
pub(super) fn serve(shared: &Shared, mut stream: &TcpStream, peer: SocketAddr) {
    let _ = crate::io_util::tune(stream);
    // Note [Two protocols on one port]: a PyTorch client's first byte is VALIDATE (0), a
    // phalanx client's is the first byte of MAGIC ('P').
    match first_byte(stream, shared.config.handshake_timeout) {
        None => return,
        Some(wire::torch::VALIDATE) => {
            let local = stream.local_addr().ok();
            match torch_refusal(shared.config.torch_clients, peer, local) {
                None => super::torch::serve(shared, stream, peer),
                Some(why) => refuse_torch(shared, stream, peer, &why),
            }
            return;
        }
        Some(_) => {}
    }
    if let Err(reason) = handshake(shared, stream) {
        // Peers that connect and leave without a byte (port probes, our own shutdown wake-up)
        // are not worth a warning; everything else is, with the peer named and never the token.
        match reason {
            HandshakeFailure::Silent(why) => {
                tracing::debug!(peer = %peer, "store: connection closed: {why}")
            }
            HandshakeFailure::Refused(why) => {
                tracing::warn!(peer = %peer, "store: refused connection: {why}")
            }
        }
        return;
    }
    tracing::debug!(peer = %peer, "store: client authenticated");
    let _ = stream.set_read_timeout(None);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    loop {
        let body = match read_frame(stream) {
            Ok(FrameRead::Frame(body)) => body,
            Ok(FrameRead::Closed) => return,
            Ok(FrameRead::Malformed(e)) => {
                tracing::warn!(peer = %peer, "store: malformed frame, connection dropped: {e}");
                return;
            }
            Err(e) => {
                if !shared.stopping.load(Ordering::SeqCst) {
                    tracing::debug!(peer = %peer, error = %e, "store: connection lost");
                }
                return;
            }
        };
        let req = match wire::decode_request(&body) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(peer = %peer, "store: malformed request, connection dropped: {e}");
                return;
            }
        };
        let Some(reply) = execute(shared, &req, stream) else {
            return; // the client left during a wait, or the server is stopping
        };
        let t = &shared.traffic;
        t.requests.fetch_add(1, Ordering::Relaxed);
        t.bytes_in.fetch_add(body.len() as u64, Ordering::Relaxed);
        t.bytes_out.fetch_add(reply.len() as u64, Ordering::Relaxed);
        if let Err(e) = stream.write_all(&reply) {
            tracing::debug!(peer = %peer, error = %e, op = req.op(), "store: cannot send reply");
            return;
        }
    }
}

/// The connection's first byte, left unread; `None` when the peer leaves or stays silent for
/// `timeout`.
fn first_byte(stream: &TcpStream, timeout: Duration) -> Option<u8> {
    stream.set_read_timeout(Some(timeout)).ok()?;
    let mut b = [0u8; 1];
    loop {
        return match stream.peek(&mut b) {
            Ok(1) => Some(b[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            _ => None,
        };
    }
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

enum HandshakeFailure {
    Silent(String),
    Refused(String),
}

fn handshake(shared: &Shared, mut stream: &TcpStream) -> Result<(), HandshakeFailure> {
    let timeout = shared.config.handshake_timeout;
    let deadline = Instant::now() + timeout;
    let io_fail = |e: io::Error, stage: &str| match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => HandshakeFailure::Refused(format!(
            "did not finish the handshake ({stage}) within {timeout:?}"
        )),
        _ if stage == "hello" => HandshakeFailure::Silent(e.to_string()),
        _ => HandshakeFailure::Refused(format!("{e} during the handshake ({stage})")),
    };
    let _ = stream.set_write_timeout(Some(timeout));
    let mut hs = ServerHandshake::new(&shared.auth, phalanx_core::job_proof::nonce());

    let mut header = [0u8; CLIENT_HELLO_HEADER_LEN];
    read_exact_by(stream, &mut header, deadline).map_err(|e| io_fail(e, "hello"))?;
    let rest_len = hs.on_hello_header(&header).map_err(|r| refuse(stream, r))?;
    let mut rest = vec![0u8; rest_len]; // bounded: job id ≤ MAX_JOB_ID_LEN, checked above
    read_exact_by(stream, &mut rest, deadline).map_err(|e| io_fail(e, "job id"))?;
    let server_hello = hs.on_hello_rest(&rest).map_err(|r| refuse(stream, r))?;
    stream
        .write_all(&server_hello)
        .map_err(|e| io_fail(e, "server hello"))?;

    let mut proof = [0u8; CLIENT_PROOF_LEN];
    read_exact_by(stream, &mut proof, deadline).map_err(|e| io_fail(e, "proof"))?;
    let verdict = hs.on_proof(&proof).map_err(|r| refuse(stream, r))?;
    stream
        .write_all(&verdict)
        .map_err(|e| io_fail(e, "verdict"))?;
    Ok(())
}

/// Sends the rejection's reply, if any, so the client can name the failure; then gives up.
fn refuse(mut stream: &TcpStream, r: Rejection) -> HandshakeFailure {
    if let Some(reply) = r.reply {
        let _ = stream.write_all(&reply);
    }
    HandshakeFailure::Refused(r.reason)
}

/// What a request produced, owning its data until encoded.
enum Reply {
    Unit,
    Value(Vec<u8>),
    Int(i64),
    Bool(bool),
    Values(Vec<Vec<u8>>),
    Timeout(String),
    Error(String, String),
}

/// Runs one request against the table; `None` when a wait was cancelled.
fn execute(shared: &Shared, req: &Request<'_>, stream: &TcpStream) -> Option<Vec<u8>> {
    let table = &shared.table;
    let mut cancel = || shared.stopping.load(Ordering::SeqCst) || peek_peer(stream) == Peer::Gone;
    let mut wait = |keys: &[&str], timeout_ms: u64| {
        table.wait_get(
            keys,
            Duration::from_millis(timeout_ms),
            Some(LIVENESS_CHECK),
            &mut cancel,
        )
    };
    let from_error = |e: crate::Error| match e {
        crate::Error::Value { key, reason } => Reply::Error(key, reason),
        other => Reply::Error(String::new(), other.to_string()),
    };
    let reply = match req {
        Request::Set { key, value } => {
            table.set(key, value);
            Reply::Unit
        }
        Request::Get { key, timeout_ms } => match wait(&[key], *timeout_ms) {
            Ok(mut v) => Reply::Value(v.pop().expect("one key")),
            Err(WaitError::Timeout(k)) => Reply::Timeout(k),
            Err(WaitError::Cancelled) => return None,
        },
        Request::Add { key, delta } => table.add(key, *delta).map_or_else(from_error, Reply::Int),
        Request::CompareSet {
            key,
            expected,
            desired,
        } => Reply::Value(table.compare_set(key, expected, desired)),
        Request::Wait { keys, timeout_ms } => match wait(keys, *timeout_ms) {
            Ok(_) => Reply::Unit,
            Err(WaitError::Timeout(k)) => Reply::Timeout(k),
            Err(WaitError::Cancelled) => return None,
        },
        Request::Check { keys } => Reply::Bool(table.check(keys)),
        Request::Delete { key } => Reply::Bool(table.delete(key)),
        Request::NumKeys => Reply::Int(table.num_keys()),
        Request::Append { key, value } => table
            .append(key, value)
            .map_or_else(from_error, |()| Reply::Unit),
        Request::MultiGet { keys, timeout_ms } => match wait(keys, *timeout_ms) {
            Ok(v) => Reply::Values(v),
            Err(WaitError::Timeout(k)) => Reply::Timeout(k),
            Err(WaitError::Cancelled) => return None,
        },
        Request::MultiSet { pairs } => {
            table.multi_set(pairs);
            Reply::Unit
        }
    };
    Some(encode(&reply))
}

fn encode(reply: &Reply) -> Vec<u8> {
    let resp = match reply {
        Reply::Unit => Response::Unit,
        Reply::Value(v) => Response::Value(v),
        Reply::Int(i) => Response::Int(*i),
        Reply::Bool(b) => Response::Bool(*b),
        Reply::Values(vs) => Response::Values(vs.iter().map(Vec::as_slice).collect()),
        Reply::Timeout(k) => Response::Timeout { key: k },
        Reply::Error(k, m) => Response::Error { key: k, message: m },
    };
    wire::encode_response(&resp).unwrap_or_else(|e| {
        wire::encode_response(&Response::Error {
            key: "",
            message: &e.to_string(),
        })
        .expect("a short error always fits a frame")
    })
}
