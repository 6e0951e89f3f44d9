//! The TCP store under hostile or unlucky conditions: wrong credentials, garbage, oversized and
//! truncated frames, slowloris, refused connections, 1,024 clients, shutdown with waiters.
//! Every test checks that the server keeps serving well-behaved clients afterwards.

use crate::common;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::{
    assert_closed_by_server, eventually, localhost, raw_authenticated, server, still_serves,
    with_deadline, T,
};
use phalanx_store::wire::{self, Request, MAX_KEY_LEN};
use phalanx_store::{Auth, Error, Store, StoreServer, TcpStore};

#[test]
fn wrong_token_is_refused_and_others_are_served() {
    with_deadline(30, || {
        let (server, auth) = server();
        let addr = server.local_addr().to_string();
        let good = TcpStore::connect(&addr, &auth, T).unwrap();
        good.set("k", b"v").unwrap();

        let bad = Auth::new(auth.job_id.clone(), b"wrong".to_vec());
        let start = Instant::now();
        match TcpStore::connect(&addr, &bad, T) {
            Err(Error::Auth { addr: a, reason }) => {
                assert_eq!(a, addr);
                assert!(!reason.contains(&auth.token_hex()));
            }
            other => panic!("expected an auth error, got {other:?}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "auth failures are not retried"
        );

        let other_job = Auth::new("another-job", auth.token.clone());
        match TcpStore::connect(&addr, &other_job, T) {
            Err(Error::Auth { reason, .. }) => assert!(reason.contains("job"), "{reason}"),
            other => panic!("expected an auth error, got {other:?}"),
        }
        let empty = Auth::new(auth.job_id.clone(), Vec::new());
        assert!(matches!(
            TcpStore::connect(&addr, &empty, T),
            Err(Error::Auth { .. })
        ));

        // The existing client and new good ones are unaffected.
        assert_eq!(good.get("k").unwrap(), b"v");
        still_serves(&server, &auth);
    });
}

#[test]
fn client_refuses_a_rogue_server() {
    with_deadline(30, || {
        // A "store" that does not know the token cannot prove it; the client stops before
        // revealing a proof of its own.
        let rogue = StoreServer::bind(localhost(), Auth::new("job", b"rogue".to_vec())).unwrap();
        let me = Auth::new("job", b"real".to_vec());
        match TcpStore::connect(&rogue.local_addr().to_string(), &me, T) {
            Err(Error::Auth { reason, .. }) => {
                assert!(reason.contains("server could not prove"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn client_refuses_a_peer_that_is_not_a_store() {
    with_deadline(30, || {
        let l = TcpListener::bind(localhost()).unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(&[b'x'; 200]).unwrap();
            std::thread::sleep(Duration::from_millis(200));
        });
        let err = TcpStore::connect(&addr, &Auth::random("j"), T).unwrap_err();
        assert!(matches!(err, Error::Protocol { .. }), "{err:?}");
        assert!(err.to_string().contains("not a phalanx store"), "{err}");
        t.join().unwrap();
    });
}

#[test]
fn garbage_before_handshake_is_dropped() {
    with_deadline(30, || {
        let (server, auth) = server();
        for garbage in [
            &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            &[0u8; 8],
            &[0xff; 64],
        ] {
            let mut s = TcpStream::connect(server.local_addr()).unwrap();
            s.write_all(garbage).unwrap();
            assert_closed_by_server(&mut s);
        }
        // A hello with a huge job id length: refused before allocating it.
        let mut s = TcpStream::connect(server.local_addr()).unwrap();
        let mut hello = wire::MAGIC.to_le_bytes().to_vec();
        hello.extend_from_slice(&wire::PROTOCOL_VERSION.to_le_bytes());
        hello.extend_from_slice(&u16::MAX.to_le_bytes());
        s.write_all(&hello).unwrap();
        assert_closed_by_server(&mut s);
        still_serves(&server, &auth);
        assert!(eventually(5, || server.num_connections() == 0));
    });
}

#[test]
fn malformed_frames_after_handshake_close_only_that_connection() {
    with_deadline(30, || {
        let (server, auth) = server();
        let neighbour = TcpStore::connect(&server.local_addr().to_string(), &auth, T).unwrap();
        neighbour.set("n", b"1").unwrap();

        // Oversized length prefix.
        let mut s = raw_authenticated(server.local_addr(), &auth);
        s.write_all(&u32::MAX.to_le_bytes()).unwrap();
        assert_closed_by_server(&mut s);

        // A frame whose key length exceeds the limit.
        let mut s = raw_authenticated(server.local_addr(), &auth);
        let mut body = vec![1u8]; // SET
        body.extend_from_slice(&(MAX_KEY_LEN as u32 + 1).to_le_bytes());
        body.extend_from_slice(&[0; 16]);
        s.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
        s.write_all(&body).unwrap();
        assert_closed_by_server(&mut s);

        // Unknown opcode.
        let mut s = raw_authenticated(server.local_addr(), &auth);
        s.write_all(&[1, 0, 0, 0, 250]).unwrap();
        assert_closed_by_server(&mut s);

        // Truncated frame: the header promises 100 bytes, 10 come, then the writer closes.
        let mut s = raw_authenticated(server.local_addr(), &auth);
        s.write_all(&100u32.to_le_bytes()).unwrap();
        s.write_all(&[1; 10]).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        assert_closed_by_server(&mut s);

        // A valid request on a raw connection still works (the harness itself is sound).
        let mut s = raw_authenticated(server.local_addr(), &auth);
        s.write_all(&wire::encode_request(&Request::NumKeys).unwrap())
            .unwrap();
        let mut reply = [0u8; 13];
        std::io::Read::read_exact(&mut s, &mut reply).unwrap();
        assert!(matches!(
            wire::decode_response(&reply[4..]).unwrap(),
            wire::Response::Int(_)
        ));
        drop(s);

        assert_eq!(neighbour.get("n").unwrap(), b"1");
        still_serves(&server, &auth);
    });
}

#[test]
fn slowloris_is_dropped_after_the_handshake_timeout() {
    with_deadline(30, || {
        let (server, auth) = server(); // handshake timeout 500 ms
        let mut slow = TcpStream::connect(server.local_addr()).unwrap();
        let hello = phalanx_store::wire::ClientHandshake::new(&auth, [1; 32])
            .hello()
            .unwrap();
        let start = Instant::now();
        // Drip the hello one byte per 100 ms: each read makes progress, the deadline still hits.
        let mut closed = false;
        for b in &hello {
            if slow.write_all(&[*b]).is_err() {
                closed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            if start.elapsed() > Duration::from_secs(3) {
                break;
            }
        }
        if !closed {
            assert_closed_by_server(&mut slow);
        }
        let took = start.elapsed();
        assert!(
            took < Duration::from_secs(3),
            "slowloris held the connection for {took:?}"
        );
        // A silent connection is dropped too, and meanwhile others are served.
        let mut silent = TcpStream::connect(server.local_addr()).unwrap();
        still_serves(&server, &auth);
        assert_closed_by_server(&mut silent);
        assert!(eventually(5, || server.num_connections() == 0));
    });
}

#[test]
fn oversized_arguments_are_refused_client_side() {
    with_deadline(30, || {
        let (server, auth) = server();
        let s = TcpStore::connect(&server.local_addr().to_string(), &auth, T).unwrap();
        let long = "k".repeat(MAX_KEY_LEN + 1);
        assert!(matches!(s.set(&long, b"v"), Err(Error::Invalid { .. })));
        s.set("fine", b"v").unwrap();
        assert_eq!(s.get("fine").unwrap(), b"v");
    });
}

/// xorshift64*: a deterministic generator, so a failing input can be replayed from its seed.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

#[test]
fn random_inputs_never_stop_the_server() {
    with_deadline(60, || {
        let (server, auth) = server();
        let keeper = TcpStore::connect(&server.local_addr().to_string(), &auth, T).unwrap();
        keeper.set("kept", b"yes").unwrap();
        let addr = server.local_addr();
        std::thread::scope(|sc| {
            for t in 0..8u64 {
                let auth = &auth;
                sc.spawn(move || {
                    let mut rng = 0x9E37_79B9_7F4A_7C15 ^ (t + 1);
                    for i in 0..250 {
                        let len = (next(&mut rng) % 300) as usize;
                        let mut bytes: Vec<u8> = (0..len).map(|_| next(&mut rng) as u8).collect();
                        let mut s = match i % 3 {
                            // Garbage where the hello should be.
                            0 => TcpStream::connect(addr).unwrap(),
                            // Garbage frames after a valid handshake.
                            1 => raw_authenticated(addr, auth),
                            // A plausible frame: right length, random body with a real opcode.
                            _ => {
                                let mut frame = (len as u32 + 1).to_le_bytes().to_vec();
                                frame.push((next(&mut rng) % 12) as u8);
                                frame.append(&mut bytes);
                                bytes = frame;
                                raw_authenticated(addr, auth)
                            }
                        };
                        let _ = s.write_all(&bytes);
                        let _ = s.shutdown(std::net::Shutdown::Write);
                        assert_closed_by_server(&mut s);
                    }
                });
            }
        });
        assert_eq!(keeper.get("kept").unwrap(), b"yes");
        still_serves(&server, &auth);
        assert!(
            eventually(10, || server.num_connections() == 1),
            "{} connections left",
            server.num_connections()
        );
    });
}

/// A client that hangs up while its `get` is parked on the event loop (Note [One event loop
/// for every connection]) ends that wait and its connection, and the key it waited for is
/// served as usual afterwards: the parked wait left the table.
#[test]
fn a_client_that_hangs_up_mid_wait_leaves_the_server() {
    with_deadline(30, || {
        let (server, auth) = server();
        let mut waiters: Vec<TcpStream> = (0..8)
            .map(|_| {
                let mut s = raw_authenticated(server.local_addr(), &auth);
                let get = Request::Get {
                    key: "late",
                    timeout_ms: 600_000,
                };
                s.write_all(&wire::encode_request(&get).unwrap()).unwrap();
                s
            })
            .collect();
        assert!(eventually(5, || server.num_connections() == 8));
        for s in waiters.drain(..) {
            s.shutdown(std::net::Shutdown::Both).unwrap();
        }
        assert!(
            eventually(5, || server.num_connections() == 0),
            "{} connections left",
            server.num_connections()
        );
        let store = TcpStore::connect(&server.local_addr().to_string(), &auth, T).unwrap();
        store.set("late", b"now").unwrap();
        assert_eq!(store.get("late").unwrap(), b"now");
        still_serves(&server, &auth);
    });
}
