//! Blocking socket helpers: reads bounded by a deadline, and whole-frame reads.

use std::io::{self, Read};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::wire::{self, DecodeError};
use crate::{Error, Result};

/// First and largest pause between connection attempts.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Socket options for every store connection: `TCP_NODELAY` (requests are small and latency
/// bound) and TCP keepalive, so that a peer whose host vanished without a FIN or RST (power
/// loss, partition) is noticed in about 20 s instead of hanging a blocked `get` until its timeout.
pub(crate) fn tune(socket: socket2::SockRef<'_>) -> io::Result<()> {
    socket.set_tcp_nodelay(true)?;
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(2))
        .with_retries(5);
    socket.set_tcp_keepalive(&keepalive)
}

/// Fills `buf` by `deadline`. The deadline bounds the whole read, not each `read` call, so a
/// peer that drips one byte at a time (slowloris) still runs out of time.
pub(crate) fn read_exact_by(
    mut stream: &TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What a client waiting in a blocking request is doing, seen without reading its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Peer {
    /// Nothing to read: still waiting.
    Quiet,
    /// It sent more bytes (PyTorch's CANCEL_WAIT).
    Sent,
    /// It hung up, or the socket failed.
    Gone,
}

/// Peeks at `stream` without blocking (checked while a client waits in `get`/`wait`).
pub(crate) fn peek_peer(stream: &TcpStream) -> Peer {
    use std::os::fd::AsRawFd;
    let mut byte = 0u8;
    // One system call: a peek that does not block, instead of switching the socket to
    // non-blocking and back around it (three, on every wait of every connection).
    // SAFETY: recv into one valid byte on a descriptor the stream owns.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => Peer::Gone,
        n if n > 0 => Peer::Sent,
        _ => match io::Error::last_os_error().kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Peer::Quiet,
            _ => Peer::Gone,
        },
    }
}

/// Outcome of reading one frame.
pub(crate) enum FrameRead {
    /// A whole frame body.
    Frame(Vec<u8>),
    /// The peer closed the connection cleanly between frames.
    Closed,
    /// The header announced a length past the limit.
    Malformed(DecodeError),
}

/// Reads one frame with the socket's current read timeout. The body buffer grows only as bytes
/// arrive, so a header that lies about a large length costs nothing until the bytes exist.
pub(crate) fn read_frame(mut stream: &TcpStream) -> io::Result<FrameRead> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match stream.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(FrameRead::Closed),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = match wire::frame_len(header) {
        Ok(n) => n,
        Err(e) => return Ok(FrameRead::Malformed(e)),
    };
    let mut body = Vec::with_capacity(len.min(64 * 1024));
    let read = stream.take(len as u64).read_to_end(&mut body)?;
    if read < len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(FrameRead::Frame(body))
}

fn retryable(e: &io::Error) -> bool {
    // Refused: the server is not up yet. Resolution and routing errors: a cluster whose DNS or
    // network comes up after the workers (Kubernetes). Bad input (InvalidInput) never heals.
    e.kind() != io::ErrorKind::InvalidInput
}

fn connect_once(addr: &str, left: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(
        io::ErrorKind::NotFound,
        format!("{addr} resolves to no address"),
    );
    for sa in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(
            &sa,
            left.clamp(Duration::from_millis(1), Duration::from_secs(5)),
        ) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Connects to `addr` (`host:port`), retrying a refused or unreachable address with backoff
/// (10 ms doubling to 1 s) until `timeout`; the socket is [`tune`]d.
pub(crate) fn connect(addr: &str, timeout: Duration) -> Result<TcpStream> {
    let deadline = Instant::now() + timeout;
    let mut backoff = FIRST_BACKOFF;
    let stream = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match connect_once(addr, left) {
            Ok(s) => break s,
            Err(e) if retryable(&e) && Instant::now() + backoff < deadline => {
                tracing::debug!(addr, error = %e, "store not reachable yet; retrying");
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(e) => {
                return Err(Error::Connect {
                    addr: addr.to_string(),
                    source: e,
                })
            }
        }
    };
    tune(socket2::SockRef::from(&stream)).map_err(|source| Error::Io {
        addr: addr.to_string(),
        op: "handshake",
        source,
    })?;
    Ok(stream)
}
