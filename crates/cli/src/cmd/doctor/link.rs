//! The sockets of `phalanx doctor`: every rank connects to every other rank on the address
//! `init_process_group` would listen on (both directions, so a firewall that blocks one way
//! shows), then pairs of ranks measure their link, each rank in one pair per round
//! ([`rounds`]: the circle method of a round-robin tournament).
//!
//! These are the doctor's own TCP connections, not the process group's: a dead peer costs a
//! bounded `--connect-timeout` instead of the group's `PHALANX_TIMEOUT`, and the number of
//! messages may depend on what the link does (the group's point-to-point calls are numbered
//! by a group-wide sequence, so every rank would have to send the same count).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::data::{Clock, Half, Reach, Rtt};

/// Bound on every read and write of a measurement: a partner may still be busy with its own
/// earlier pair, a stuck one must not hang the doctor.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);
/// Accepted connections must start with this, then the job's nonce and the sender's rank.
const MAGIC: &[u8; 8] = b"PHXDOCT1";
/// Pings timed per link (after [`PING_WARMUP`] untimed ones); the median is reported.
const PINGS: usize = 50;
const PING_WARMUP: usize = 5;
/// Clock exchanges with rank 0; the one with the least delay is kept (NTP's filter).
const CLOCK_SAMPLES: usize = 8;
/// Bandwidth is sent in frames of this many bytes.
const CHUNK: usize = 256 << 10;

/// How long each bandwidth direction runs, and its byte cap.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BwLimits {
    pub(crate) time: Duration,
    pub(crate) bytes: usize,
}

/// Pairs per round: every rank appears at most once per round (one sits out when the world
/// size is odd), and every pair `(a, b)`, `a < b`, appears exactly once over all rounds.
pub(crate) fn rounds(n: usize) -> Vec<Vec<(usize, usize)>> {
    if n < 2 {
        return Vec::new();
    }
    let m = n + n % 2; // with a "bye" player m - 1 when n is odd
    (0..m - 1)
        .map(|r| {
            (0..m / 2)
                .filter_map(|k| {
                    let x = (r + k) % (m - 1);
                    let y = if k == 0 {
                        m - 1
                    } else {
                        (r + m - 1 - k) % (m - 1)
                    };
                    (x < n && y < n).then(|| (x.min(y), x.max(y)))
                })
                .collect()
        })
        .collect()
}

/// The connections of one rank after [`connect_all`]: the socket of each pair with a
/// higher rank (this rank connected) or a lower rank (it connected to this one).
pub(crate) struct Peers {
    pub(crate) conns: Vec<Option<TcpStream>>,
    pub(crate) reach: Reach,
}

fn hello(nonce: u64, rank: usize) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&nonce.to_le_bytes());
    h[16..].copy_from_slice(&(rank as u32).to_le_bytes());
    h
}

/// Connects to every peer with an address (within `timeout`) while accepting every peer's
/// connection (within `timeout` plus a margin). Never fails: what did not work is in `reach`.
pub(crate) fn connect_all(
    me: usize,
    addrs: &[Option<SocketAddr>],
    listener: Option<TcpListener>,
    nonce: u64,
    timeout: Duration,
) -> Peers {
    let n = addrs.len();
    let deadline = Instant::now() + timeout;
    let acceptor = listener.map(|l| {
        let expect = n - 1;
        std::thread::spawn(move || {
            accept_all(l, nonce, expect, deadline + Duration::from_millis(500))
        })
    });
    let dialers: Vec<_> = (0..n)
        .filter(|&p| p != me)
        .map(|p| {
            let addr = addrs[p];
            std::thread::spawn(move || match addr {
                None => Err(format!(
                    "rank {p} has no address (its interface selection failed)"
                )),
                Some(a) => dial(a, me, nonce, deadline),
            })
        })
        .zip((0..n).filter(|&p| p != me))
        .collect();
    let mut conns: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let mut reach = Reach {
        out: vec![None; n],
        inc: vec![false; n],
    };
    reach.inc[me] = true;
    for (h, p) in dialers {
        match h
            .join()
            .unwrap_or_else(|_| Err("dialer thread panicked".into()))
        {
            Ok(s) if p > me => conns[p] = Some(s),
            Ok(_) => {}
            Err(e) => reach.out[p] = Some(e),
        }
    }
    if let Some(h) = acceptor {
        for (p, s) in h.join().unwrap_or_default() {
            if p < n && p != me {
                reach.inc[p] = true;
                if p < me {
                    conns[p] = Some(s);
                }
            }
        }
    }
    Peers { conns, reach }
}

fn dial(addr: SocketAddr, me: usize, nonce: u64, deadline: Instant) -> Result<TcpStream, String> {
    let mut last = String::from("no attempt (timeout 0)");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("connect to {addr}: {last}"));
        }
        let attempt = TcpStream::connect_timeout(&addr, left).and_then(|mut s| {
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ))?;
            s.write_all(&hello(nonce, me))?;
            let mut ack = [0u8; 1];
            s.read_exact(&mut ack)?;
            Ok(s)
        });
        match attempt {
            Ok(s) => return Ok(s),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(50).min(left));
    }
}

fn accept_all(
    listener: TcpListener,
    nonce: u64,
    expect: usize,
    deadline: Instant,
) -> Vec<(usize, TcpStream)> {
    let mut got = Vec::new();
    if listener.set_nonblocking(true).is_err() {
        return got;
    }
    while got.len() < expect && Instant::now() < deadline {
        match listener.accept() {
            Ok((mut s, _)) => {
                let greeted = (|| -> io::Result<Option<usize>> {
                    s.set_nonblocking(false)?;
                    s.set_nodelay(true)?;
                    s.set_read_timeout(Some(Duration::from_secs(2)))?;
                    let mut h = [0u8; 20];
                    s.read_exact(&mut h)?;
                    let want = hello(nonce, 0);
                    if h[..16] != want[..16] {
                        return Ok(None); // not one of this job's ranks: ignore it
                    }
                    s.write_all(&[1])?;
                    Ok(Some(
                        u32::from_le_bytes(h[16..].try_into().unwrap()) as usize
                    ))
                })();
                if let Ok(Some(p)) = greeted {
                    if !got.iter().any(|(q, _)| *q == p) {
                        got.push((p, s));
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    got
}

/// Nanoseconds since the Unix epoch on this host's clock.
fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Measures the link between `me` and `peer` over `s`: both ranks call it in the same round.
/// The lower rank leads: it times the pings; each side times its own sending direction; the
/// partner of rank 0 measures its clock against rank 0's.
pub(crate) fn measure(me: usize, peer: usize, s: &mut TcpStream, bw: BwLimits) -> Half {
    let mut half = Half {
        peer,
        ..Half::default()
    };
    let leader = me < peer;
    let result = (|| -> io::Result<()> {
        s.set_read_timeout(Some(STEP_TIMEOUT))?;
        s.set_write_timeout(Some(STEP_TIMEOUT))?;
        if leader {
            half.rtt = Some(ping(s)?);
        } else {
            pong(s)?;
        }
        if me == 0 {
            clock_server(s)?;
        } else if peer == 0 {
            half.clock = Some(clock_client(s)?);
        }
        let (gbps, bytes) = if leader {
            let tx = send_bw(s, bw)?;
            recv_bw(s)?;
            tx
        } else {
            recv_bw(s)?;
            send_bw(s, bw)?
        };
        half.tx_gbps = Some(gbps);
        half.tx_bytes = bytes;
        Ok(())
    })();
    if let Err(e) = result {
        half.error = Some(e.to_string());
    }
    half
}

fn ping(s: &mut TcpStream) -> io::Result<Rtt> {
    let mut times = Vec::with_capacity(PINGS);
    let mut buf = [0u8; 8];
    for i in 0..PING_WARMUP + PINGS {
        let t = Instant::now();
        s.write_all(&(i as u64).to_le_bytes())?;
        s.read_exact(&mut buf)?;
        if i >= PING_WARMUP {
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(Rtt {
        median_us: times[times.len() / 2],
        min_us: times[0],
        samples: times.len(),
    })
}

fn pong(s: &mut TcpStream) -> io::Result<()> {
    let mut buf = [0u8; 8];
    for _ in 0..PING_WARMUP + PINGS {
        s.read_exact(&mut buf)?;
        s.write_all(&buf)?;
    }
    Ok(())
}

fn clock_server(s: &mut TcpStream) -> io::Result<()> {
    let mut t1 = [0u8; 8];
    for _ in 0..CLOCK_SAMPLES {
        s.read_exact(&mut t1)?;
        let t2 = now_ns();
        let mut reply = [0u8; 16];
        reply[..8].copy_from_slice(&t2.to_le_bytes());
        reply[8..].copy_from_slice(&now_ns().to_le_bytes());
        s.write_all(&reply)?;
    }
    Ok(())
}

/// NTP's on-wire calculation: offset θ = ((t2 − t1) + (t3 − t4)) / 2 is rank 0's clock minus
/// this one's, delay δ = (t4 − t1) − (t3 − t2).
fn clock_client(s: &mut TcpStream) -> io::Result<Clock> {
    let mut best: Option<Clock> = None;
    for _ in 0..CLOCK_SAMPLES {
        let t1 = now_ns();
        s.write_all(&t1.to_le_bytes())?;
        let mut reply = [0u8; 16];
        s.read_exact(&mut reply)?;
        let t4 = now_ns();
        let t2 = i64::from_le_bytes(reply[..8].try_into().unwrap());
        let t3 = i64::from_le_bytes(reply[8..].try_into().unwrap());
        let theta = ((t2 - t1) + (t3 - t4)) as f64 / 2.0;
        let delay = ((t4 - t1) - (t3 - t2)) as f64;
        let sample = Clock {
            offset_us: -theta / 1e3,
            rtt_us: delay / 1e3,
        };
        if best.is_none_or(|b| sample.rtt_us < b.rtt_us) {
            best = Some(sample);
        }
    }
    Ok(best.expect("CLOCK_SAMPLES > 0"))
}

/// Sends frames until the time or byte budget is spent, then an empty frame; the rate counts
/// until the receiver's acknowledgement, so bytes still queued at the end are included.
fn send_bw(s: &mut TcpStream, bw: BwLimits) -> io::Result<(f64, u64)> {
    let mut frame = vec![0x5a_u8; 4 + CHUNK];
    frame[..4].copy_from_slice(&(CHUNK as u32).to_le_bytes());
    let start = Instant::now();
    let mut sent = 0usize;
    while sent == 0 || (sent < bw.bytes && start.elapsed() < bw.time) {
        s.write_all(&frame)?;
        sent += CHUNK;
    }
    s.write_all(&0u32.to_le_bytes())?;
    let mut ack = [0u8; 8];
    s.read_exact(&mut ack)?;
    let secs = start.elapsed().as_secs_f64();
    let got = u64::from_le_bytes(ack);
    if got != sent as u64 {
        return Err(io::Error::other(format!(
            "sent {sent} bytes, the receiver counted {got}"
        )));
    }
    Ok((sent as f64 * 8.0 / secs / 1e9, got))
}

fn recv_bw(s: &mut TcpStream) -> io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let mut h = [0u8; 4];
        s.read_exact(&mut h)?;
        let len = u32::from_le_bytes(h) as usize;
        if len == 0 {
            break;
        }
        if len > CHUNK {
            return Err(io::Error::other(format!(
                "frame of {len} bytes (at most {CHUNK})"
            )));
        }
        s.read_exact(&mut buf[..len])?;
        total += len as u64;
    }
    s.write_all(&total.to_le_bytes())
}

#[cfg(test)]
mod tests;
