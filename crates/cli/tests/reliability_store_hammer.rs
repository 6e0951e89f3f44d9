//! Bad input against a live job: while a real 2-rank `phalanx bench allreduce --check` runs,
//! client threads open thousands of connections to its store port with garbage, truncated
//! hellos, oversized lengths (before and after authentication), wrong tokens and wrong job ids,
//! plus slowloris connections that dribble bytes. The job must finish correctly (exit 0, check
//! ok), the store must keep serving real clients throughout, every hostile connection must be
//! dropped, and the job token (PHALANX_TOKEN) must never appear in any output, even at
//! PHALANX_DEBUG=TRACE.

mod launch_util;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use launch_util::{free_port, job_credentials, phalanx, run, start, Finished};
use phalanx_store::wire::{
    encode_request, ClientHandshake, Request, CLIENT_PROOF_LEN, NONCE_LEN, SERVER_HELLO_LEN,
};
use phalanx_store::{Auth, Store, TcpStore};
use phalanx_testing::fuzz::{mutate, Rng};

/// Hostile connections to open (the slowloris ones come on top): issue 6 asks for 100,000+.
const HOSTILE: usize = 100_000;
const THREADS: usize = 4;
const SLOWLORIS: usize = 40;
/// How long the job should run: long enough to outlast the hammer on a loaded machine.
const JOB_SECONDS: f64 = 40.0;
/// Deadline of the job: 6× its planned length, because a 64 KiB shared-memory allreduce takes
/// 1–100 µs depending on what else runs on the machine between the calibration and the job.
const JOB_DEADLINE: Duration = Duration::from_secs(240);

/// The bench's median time per allreduce (µs) for `size`, from its table.
fn time_us(f: &Finished) -> f64 {
    f.stdout
        .lines()
        .chain(f.stderr.lines())
        .filter_map(|l| l.split_once("]: ").map(|(_, b)| b))
        .find_map(|b| {
            let cols: Vec<&str> = b.split_whitespace().collect();
            (cols.len() >= 7 && cols[0] == "64K").then(|| cols[3].parse().ok())?
        })
        .unwrap_or_else(|| {
            panic!(
                "no 64K row in the bench output:\n{}\n{}",
                f.stdout, f.stderr
            )
        })
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn open(addr: SocketAddr) -> Option<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(3))).ok()?;
    Some(s)
}

/// Whether the server closed the connection (EOF or reset) within the read timeout, after
/// draining whatever it sent first.
fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 512];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
    }
}

/// Completes the handshake by hand; `None` when refused.
fn authenticate(addr: SocketAddr, auth: &Auth, nonce: [u8; NONCE_LEN]) -> Option<TcpStream> {
    let mut s = open(addr)?;
    let hs = ClientHandshake::new(auth, nonce);
    s.write_all(&hs.hello().unwrap()).ok()?;
    let mut hello = [0u8; SERVER_HELLO_LEN];
    s.read_exact(&mut hello).ok()?;
    let proof = hs.on_server_hello(&hello).ok()?;
    s.write_all(&proof).ok()?;
    let mut verdict = [0u8; 1];
    s.read_exact(&mut verdict).ok()?;
    hs.on_verdict(verdict).ok()?;
    Some(s)
}

#[derive(Default)]
struct Tally {
    opened: AtomicUsize,
    dropped: AtomicUsize,
    wrong_token_refused: AtomicUsize,
    not_dropped: AtomicUsize,
}

/// One hostile connection of kind `i % 9`; records whether the server dropped it.
fn attack(i: usize, addr: SocketAddr, auth: &Auth, rng: &mut Rng, t: &Tally) {
    let valid_hello = ClientHandshake::new(auth, [i as u8; NONCE_LEN])
        .hello()
        .unwrap();
    let kind = i % 9;
    let mut s = match kind {
        6..=8 => match authenticate(addr, auth, [i as u8; NONCE_LEN]) {
            Some(s) => s,
            None => {
                t.not_dropped.fetch_add(1, Ordering::Relaxed); // a real client was refused
                return;
            }
        },
        _ => match open(addr) {
            Some(s) => s,
            None => return,
        },
    };
    t.opened.fetch_add(1, Ordering::Relaxed);
    let expect_drop = match kind {
        // Random garbage.
        0 => {
            // At least a hello header's worth, so the server has something to refuse.
            let n = 8 + rng.below(1024);
            let _ = s.write_all(&rng.bytes(n));
            true
        }
        // A mutated hello: flipped, truncated, extended.
        1 => {
            let mut h = valid_hello.clone();
            mutate(rng, &mut h, 512);
            let _ = s.write_all(&h);
            // A mutant may still be a valid prefix the server waits on; close ourselves.
            false
        }
        // A truncated hello, then we leave.
        2 => {
            let _ = s.write_all(&valid_hello[..1 + rng.below(valid_hello.len() - 1)]);
            false
        }
        // Oversized job id length.
        3 => {
            let mut h = valid_hello[..8].to_vec();
            h[6..8].copy_from_slice(&u16::MAX.to_le_bytes());
            let _ = s.write_all(&h);
            true
        }
        // Another protocol on the port.
        4 => {
            let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            true
        }
        // The right job id, a forged proof (a client without the token).
        5 => {
            let _ = s.write_all(&valid_hello);
            let mut hello = [0u8; SERVER_HELLO_LEN];
            if s.read_exact(&mut hello).is_ok() {
                let _ = s.write_all(&rng.bytes(CLIENT_PROOF_LEN));
                let mut verdict = [9u8; 1];
                match s.read_exact(&mut verdict) {
                    Ok(()) if verdict[0] == 1 => panic!("a forged proof was accepted"),
                    _ => {
                        t.wrong_token_refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            true
        }
        // Authenticated, then a frame length far over the limit.
        6 => {
            let _ = s.write_all(&u32::MAX.to_le_bytes());
            true
        }
        // Authenticated, then a frame that announces 1 MiB and stops short.
        7 => {
            let _ = s.write_all(&(1u32 << 20).to_le_bytes());
            let _ = s.write_all(&rng.bytes(100));
            false
        }
        // Authenticated, then a well-framed mutated request.
        _ => {
            let mut req = encode_request(&Request::Set {
                key: "hammer/x",
                value: b"v",
            })
            .unwrap()[4..]
                .to_vec();
            mutate(rng, &mut req, 200);
            let mut frame = (req.len() as u32).to_le_bytes().to_vec();
            frame.extend_from_slice(&req);
            let _ = s.write_all(&frame);
            false
        }
    };
    if expect_drop {
        if closed_by_server(&mut s) {
            t.dropped.fetch_add(1, Ordering::Relaxed);
        } else {
            t.not_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn the_store_survives_hostile_clients_while_a_job_runs_and_the_token_never_leaks() {
    // Calibrate the job's length on this machine, now.
    let mut cal = phalanx();
    cal.args([
        "bench",
        "allreduce",
        "--nproc-per-node",
        "2",
        "--standalone",
        "--sizes",
        "64K",
        "--iters",
        "300",
        "--warmup",
        "10",
    ]);
    let cal = run(cal, Duration::from_secs(60));
    assert_eq!(cal.code(), Some(0), "{}", cal.stderr);
    let iters = ((JOB_SECONDS * 1e6 / time_us(&cal)) as u64).clamp(2_000, 2_000_000);

    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut cmd = phalanx();
    cmd.env("PHALANX_DEBUG", "TRACE").args([
        "bench",
        "allreduce",
        "--nproc-per-node",
        "2",
        "--master-port",
        &port.to_string(),
        "--sizes",
        "64K",
        "--check",
        "--iters",
        &iters.to_string(),
        "--warmup",
        "0",
    ]);
    let job = start(cmd);
    let begin = Instant::now();
    let (job_id, token_hex) = loop {
        if let Some(c) = job_credentials(job.pid()) {
            break c;
        }
        assert!(
            begin.elapsed() < Duration::from_secs(20),
            "workers did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let auth = Auth::new(job_id.clone(), unhex(&token_hex));
    let tally = Arc::new(Tally::default());
    let done = Arc::new(AtomicBool::new(false));

    // Slowloris: connections that send one byte of the hello every 200 ms; the server must
    // cut each within its handshake timeout (5 s) plus slack.
    let slow: Vec<_> = (0..SLOWLORIS)
        .map(|i| {
            let hello = ClientHandshake::new(&auth, [i as u8; NONCE_LEN])
                .hello()
                .unwrap();
            std::thread::spawn(move || -> Option<Duration> {
                let mut s = open(addr)?;
                let t0 = Instant::now();
                for b in hello.iter().take(hello.len() - 1).cycle() {
                    if s.write_all(&[*b]).is_err() || t0.elapsed() > Duration::from_secs(15) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                // Written into a closed connection: confirm with a read.
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                closed_by_server(&mut s).then(|| t0.elapsed())
            })
        })
        .collect();

    let hammers: Vec<_> = (0..THREADS)
        .map(|th| {
            let (auth, tally) = (auth.clone(), tally.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(1000 + th as u64);
                for i in (th..HOSTILE).step_by(THREADS) {
                    attack(i, addr, &auth, &mut rng, &tally);
                }
            })
        })
        .collect();
    // Meanwhile a real client keeps using the store.
    let checker = {
        let (auth, done) = (auth.clone(), done.clone());
        std::thread::spawn(move || -> usize {
            let store = TcpStore::connect(&addr.to_string(), &auth, Duration::from_secs(10))
                .expect("a real client connects during the attack");
            let mut n = 0;
            while !done.load(Ordering::Relaxed) {
                store.set("hammer/alive", n.to_string().as_bytes()).unwrap();
                assert_eq!(store.get("hammer/alive").unwrap(), n.to_string().as_bytes());
                n += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            n
        })
    };
    for h in hammers {
        h.join().expect("a hammer thread panicked");
    }
    let hammer_took = begin.elapsed();
    // A client with the wrong token is refused (it also refuses the store, which cannot prove
    // a token it does not share with it).
    let wrong = Auth::new(job_id.clone(), b"not-the-token".to_vec());
    assert!(
        TcpStore::connect(&addr.to_string(), &wrong, Duration::from_millis(500)).is_err(),
        "a client with a wrong token got in"
    );
    let other_job = Auth::new("another-job", unhex(&token_hex));
    assert!(TcpStore::connect(&addr.to_string(), &other_job, Duration::from_millis(500)).is_err());
    let slow_cut: Vec<Option<Duration>> = slow.into_iter().map(|h| h.join().unwrap()).collect();
    let job_alive_after_attack = job.child.id() > 0 && launch_util::alive(job.pid());
    done.store(true, Ordering::Relaxed);
    let real_ops = checker
        .join()
        .expect("the real client failed during the attack");

    let f = job.wait(JOB_DEADLINE);
    let out = format!("stdout:\n{}\nstderr:\n{}", f.stdout, f.stderr);
    assert!(
        job_alive_after_attack,
        "the job ended before the attack did ({hammer_took:?}); the test proves nothing\n{out}"
    );
    assert_eq!(f.code(), Some(0), "the job failed under attack\n{out}");
    assert!(
        f.stdout
            .lines()
            .any(|l| l.contains("64K") && l.trim_end().ends_with("ok")),
        "the allreduce check did not pass\n{out}"
    );
    let opened = tally.opened.load(Ordering::Relaxed);
    assert!(
        opened + SLOWLORIS >= 2000,
        "only {opened} hostile connections"
    );
    assert_eq!(
        tally.not_dropped.load(Ordering::Relaxed),
        0,
        "hostile connections the server kept open (or real clients refused)"
    );
    assert!(tally.wrong_token_refused.load(Ordering::Relaxed) >= HOSTILE / 9 - 1);
    for (i, cut) in slow_cut.iter().enumerate() {
        let cut = cut.unwrap_or_else(|| panic!("slowloris connection {i} was never cut"));
        assert!(cut < Duration::from_secs(9), "slowloris {i} held {cut:?}");
    }
    assert!(
        real_ops > 10,
        "the real client made only {real_ops} round trips"
    );
    // The secret never reaches a log, in hex or any other case.
    for text in [&f.stdout, &f.stderr] {
        assert!(
            !text.to_lowercase().contains(&token_hex.to_lowercase()),
            "token leaked\n{out}"
        );
    }
    assert!(
        f.stderr.contains("store: refused connection"),
        "refusals are logged\n{}",
        &f.stderr[..f.stderr.len().min(4000)]
    );
    eprintln!(
        "store hammer: {opened} hostile connections + {SLOWLORIS} slowloris in {hammer_took:?}, \
         {} dropped, {} wrong-token refusals, {real_ops} real round trips; job ({iters} iters, \
         {:?}) ok",
        tally.dropped.load(Ordering::Relaxed),
        tally.wrong_token_refused.load(Ordering::Relaxed),
        f.elapsed,
    );
}
