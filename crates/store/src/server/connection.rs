//! One client connection, a task of the server's event loop (Note [One event loop for every
//! connection]): the handshake, then requests until the client leaves. A PyTorch client is
//! handed to a thread of its own (`torch.rs`).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, timeout_at, Instant};

use super::shared::{Admitted, Shared};
use crate::io_util::FrameRead;
use crate::table::{Table, WaitError};
use crate::wire::{
    self, Rejection, Request, Response, ServerHandshake, CLIENT_HELLO_HEADER_LEN, CLIENT_PROOF_LEN,
};

/// A client that stops reading replies for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Serves one connection to completion. Every failure ends this connection only.
/// `admitted` is its place under the connection cap, given up when it ends.
pub(super) async fn serve(
    shared: &Arc<Shared>,
    mut stream: TcpStream,
    peer: SocketAddr,
    admitted: Admitted,
) {
    let _ = crate::io_util::tune(socket2::SockRef::from(&stream));
    // Note [Two protocols on one port]: a PyTorch client's first byte is VALIDATE (0), a
    // phalanx client's is the first byte of MAGIC ('P').
    match first_byte(&stream, shared.config.handshake_timeout).await {
        None => return,
        Some(wire::torch::VALIDATE) => {
            super::torch::hand_over(shared, stream, peer, admitted);
            return;
        }
        Some(_) => {}
    }
    if let Err(reason) = handshake(shared, &mut stream).await {
        // Peers that connect and leave without a byte (port probes) are not worth a warning;
        // everything else is, with the peer named and never the token.
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
    loop {
        let body = match read_frame(&mut stream).await {
            Ok(FrameRead::Frame(body)) => body,
            Ok(FrameRead::Closed) => return,
            Ok(FrameRead::Malformed(e)) => {
                tracing::warn!(peer = %peer, "store: malformed frame, connection dropped: {e}");
                return;
            }
            Err(e) => {
                tracing::debug!(peer = %peer, error = %e, "store: connection lost");
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
        let Some(reply) = execute(shared, &req, &stream).await else {
            return; // the client left during a wait
        };
        let t = &shared.traffic;
        t.requests.fetch_add(1, Ordering::Relaxed);
        t.bytes_in.fetch_add(body.len() as u64, Ordering::Relaxed);
        t.bytes_out.fetch_add(reply.len() as u64, Ordering::Relaxed);
        if let Err(e) = send(&mut stream, &reply).await {
            tracing::debug!(peer = %peer, error = %e, op = req.op(), "store: cannot send reply");
            return;
        }
    }
}

/// Writes `reply`, dropping a client that takes none of it for [`WRITE_TIMEOUT`]: the limit is
/// on each write, so a large reply to a slow reader that keeps reading is not cut off.
async fn send(stream: &mut TcpStream, reply: &[u8]) -> io::Result<()> {
    let mut sent = 0;
    while sent < reply.len() {
        match timeout(WRITE_TIMEOUT, stream.write(&reply[sent..])).await {
            Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(Ok(n)) => sent += n,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
        }
    }
    Ok(())
}

/// The connection's first byte, left unread; `None` when the peer leaves or stays silent for
/// `limit`.
async fn first_byte(stream: &TcpStream, limit: Duration) -> Option<u8> {
    let mut b = [0u8; 1];
    match timeout(limit, stream.peek(&mut b)).await {
        Ok(Ok(1)) => Some(b[0]),
        _ => None,
    }
}

/// Completes when the client hangs up (or its socket fails) while it waits for a reply. A
/// client that sends more meanwhile is still there: this then never completes.
async fn hung_up(stream: &TcpStream) {
    let mut b = [0u8; 1];
    if let Ok(1..) = stream.peek(&mut b).await {
        std::future::pending::<()>().await;
    }
}

/// Reads one frame. The body buffer grows only as bytes arrive, so a header that lies about a
/// large length costs nothing until the bytes exist.
async fn read_frame(stream: &mut TcpStream) -> io::Result<FrameRead> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match stream.read(&mut header[got..]).await? {
            0 if got == 0 => return Ok(FrameRead::Closed),
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    let len = match wire::frame_len(header) {
        Ok(n) => n,
        Err(e) => return Ok(FrameRead::Malformed(e)),
    };
    let mut body = Vec::with_capacity(len.min(64 * 1024));
    let read = stream.take(len as u64).read_to_end(&mut body).await?;
    if read < len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(FrameRead::Frame(body))
}

enum HandshakeFailure {
    Silent(String),
    Refused(String),
}

async fn handshake(shared: &Shared, stream: &mut TcpStream) -> Result<(), HandshakeFailure> {
    let limit = shared.config.handshake_timeout;
    // The deadline bounds the whole handshake, not each read, so a peer that drips one byte at
    // a time (slowloris) still runs out of time.
    let deadline = Instant::now() + limit;
    let io_fail = |e: io::Error, stage: &str| match e.kind() {
        io::ErrorKind::TimedOut => HandshakeFailure::Refused(format!(
            "did not finish the handshake ({stage}) within {limit:?}"
        )),
        _ if stage == "hello" => HandshakeFailure::Silent(e.to_string()),
        _ => HandshakeFailure::Refused(format!("{e} during the handshake ({stage})")),
    };
    let mut hs = ServerHandshake::new(&shared.auth, phalanx_core::job_proof::nonce());

    let mut header = [0u8; CLIENT_HELLO_HEADER_LEN];
    read_by(stream, &mut header, deadline)
        .await
        .map_err(|e| io_fail(e, "hello"))?;
    let rest_len = match hs.on_hello_header(&header) {
        Ok(n) => n,
        Err(r) => return Err(refuse(stream, r, deadline).await),
    };
    let mut rest = vec![0u8; rest_len]; // bounded: job id ≤ MAX_JOB_ID_LEN, checked above
    read_by(stream, &mut rest, deadline)
        .await
        .map_err(|e| io_fail(e, "job id"))?;
    let server_hello = match hs.on_hello_rest(&rest) {
        Ok(h) => h,
        Err(r) => return Err(refuse(stream, r, deadline).await),
    };
    write_by(stream, &server_hello, deadline)
        .await
        .map_err(|e| io_fail(e, "server hello"))?;

    let mut proof = [0u8; CLIENT_PROOF_LEN];
    read_by(stream, &mut proof, deadline)
        .await
        .map_err(|e| io_fail(e, "proof"))?;
    let verdict = match hs.on_proof(&proof) {
        Ok(v) => v,
        Err(r) => return Err(refuse(stream, r, deadline).await),
    };
    write_by(stream, &verdict, deadline)
        .await
        .map_err(|e| io_fail(e, "verdict"))
}

/// `io` if it finishes by `deadline`, else `TimedOut`.
async fn by<T>(deadline: Instant, io: impl Future<Output = io::Result<T>>) -> io::Result<()> {
    match timeout_at(deadline, io).await {
        Ok(r) => r.map(drop),
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

/// Fills `buf` by `deadline`.
async fn read_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    by(deadline, stream.read_exact(buf)).await
}

/// Writes `buf` by `deadline`.
async fn write_by(stream: &mut TcpStream, buf: &[u8], deadline: Instant) -> io::Result<()> {
    by(deadline, stream.write_all(buf)).await
}

/// Sends the rejection's reply, if any, so the client can name the failure; then gives up.
async fn refuse(stream: &mut TcpStream, r: Rejection, deadline: Instant) -> HandshakeFailure {
    if let Some(reply) = r.reply {
        let _ = write_by(stream, &reply, deadline).await;
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

/// Runs one request against the table; `None` when the client hung up during a wait.
async fn execute(shared: &Shared, req: &Request<'_>, stream: &TcpStream) -> Option<Vec<u8>> {
    let table = &shared.table;
    let from_error = |e: crate::Error| match e {
        crate::Error::Value { key, reason } => Reply::Error(key, reason),
        other => Reply::Error(String::new(), other.to_string()),
    };
    let reply = match req {
        Request::Set { key, value } => {
            table.set(key, value);
            Reply::Unit
        }
        Request::Get { key, timeout_ms } => {
            match parked(table, &[key], *timeout_ms, stream).await {
                Ok(mut v) => Reply::Value(v.pop().expect("one key")),
                Err(WaitError::Timeout(k)) => Reply::Timeout(k),
                Err(WaitError::Cancelled) => return None,
            }
        }
        Request::Add { key, delta } => table.add(key, *delta).map_or_else(from_error, Reply::Int),
        Request::CompareSet {
            key,
            expected,
            desired,
        } => Reply::Value(table.compare_set(key, expected, desired)),
        Request::Wait { keys, timeout_ms } => {
            match parked(table, keys, *timeout_ms, stream).await {
                Ok(_) => Reply::Unit,
                Err(WaitError::Timeout(k)) => Reply::Timeout(k),
                Err(WaitError::Cancelled) => return None,
            }
        }
        Request::Check { keys } => Reply::Bool(table.check(keys)),
        Request::Delete { key } => Reply::Bool(table.delete(key)),
        Request::NumKeys => Reply::Int(table.num_keys()),
        Request::Append { key, value } => table
            .append(key, value)
            .map_or_else(from_error, |()| Reply::Unit),
        Request::MultiGet { keys, timeout_ms } => {
            match parked(table, keys, *timeout_ms, stream).await {
                Ok(v) => Reply::Values(v),
                Err(WaitError::Timeout(k)) => Reply::Timeout(k),
                Err(WaitError::Cancelled) => return None,
            }
        }
        Request::MultiSet { pairs } => {
            table.multi_set(pairs);
            Reply::Unit
        }
    };
    Some(encode(&reply))
}

/// A blocking `get`/`wait` of the client on `stream`, parked in `table`.
async fn parked(
    table: &Table,
    keys: &[&str],
    timeout_ms: u64,
    stream: &TcpStream,
) -> Result<Vec<Vec<u8>>, WaitError> {
    let limit = Duration::from_millis(timeout_ms);
    table.wait_get_parked(keys, limit, hung_up(stream)).await
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
