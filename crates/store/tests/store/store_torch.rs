//! PyTorch's TCPStore protocol on phalanx's store port (Note [Two protocols on one port]):
//! [`TorchStore`] (the client phalanx uses under torchrun) against [`StoreServer`], the two
//! protocols side by side, the loopback policy, and hostile bytes on the PyTorch path. The
//! same queries from real PyTorch run in crates/cli/tests/torch_interop.rs.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{assert_closed_by_server, localhost, server, still_serves, with_deadline, T};
use phalanx_store::wire::torch::{self, Request};
use phalanx_store::{
    keys, Error, ServerConfig, Store, StoreServer, TcpStore, TorchClients, TorchStore,
};

#[test]
fn torch_store_client_does_every_store_operation() {
    with_deadline(30, || {
        let (server, _) = server();
        let addr = server.local_addr().to_string();
        let s = TorchStore::connect(&addr, T).unwrap();
        s.set("/k", b"v1").unwrap();
        assert_eq!(s.get("/k").unwrap(), b"v1");
        assert_eq!(s.add("/n", 5).unwrap(), 5);
        assert_eq!(s.add("/n", -7).unwrap(), -2);
        assert_eq!(s.compare_set("/k", b"v1", b"v2").unwrap(), b"v2");
        assert_eq!(s.compare_set("/k", b"zz", b"v3").unwrap(), b"v2");
        assert_eq!(s.compare_set("/none", b"x", b"y").unwrap(), b"x");
        assert!(s.check(&["/k", "/n"]).unwrap());
        assert!(!s.check(&["/k", "/none"]).unwrap());
        assert!(s.delete_key("/n").unwrap());
        assert!(!s.delete_key("/n").unwrap());
        s.append("/k", b"++").unwrap();
        s.multi_set(&["/a", "/b"], &[b"1", b"2"]).unwrap();
        assert_eq!(
            s.multi_get(&["/k", "/b"]).unwrap(),
            vec![b"v2++".to_vec(), b"2".to_vec()]
        );
        assert_eq!(s.num_keys().unwrap(), 3);

        // A blocking get, woken by another client's set.
        let other = TorchStore::connect(&addr, T).unwrap();
        let waiter = std::thread::spawn(move || other.get("/late").unwrap());
        std::thread::sleep(Duration::from_millis(100));
        s.set("/late", b"x").unwrap();
        assert_eq!(waiter.join().unwrap(), b"x");

        // A wait that times out names the missing key, and cancels on the server (PyTorch's
        // CANCEL_WAIT), so the connection stays in step for the next call.
        let start = Instant::now();
        match s.wait_timeout(&["/k", "/never"], Duration::from_millis(300)) {
            Err(Error::Timeout { key, .. }) => assert_eq!(key, "/never"),
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(start.elapsed() < Duration::from_secs(3));
        assert_eq!(s.get("/k").unwrap(), b"v2++");

        // PyTorch's keys live apart from phalanx's: neither side sees the other's.
        assert_eq!(server.torch_store().get("/k").unwrap(), b"v2++");
        assert!(!server.local_store().check(&["/k"]).unwrap());
        server.local_store().set("ctl", b"phalanx").unwrap();
        assert!(!s.check(&["ctl"]).unwrap());
    });
}

#[test]
fn both_protocols_share_the_port() {
    with_deadline(30, || {
        let (server, auth) = server();
        let addr = server.local_addr().to_string();
        let torch_client = TorchStore::connect(&addr, T).unwrap();
        let phalanx_client = TcpStore::connect(&addr, &auth, T).unwrap();
        torch_client.set("/x", b"torch").unwrap();
        phalanx_client.set("x", b"phalanx").unwrap();
        assert_eq!(torch_client.get("/x").unwrap(), b"torch");
        assert_eq!(phalanx_client.get("x").unwrap(), b"phalanx");
        still_serves(&server, &auth);
    });
}

#[test]
fn a_refused_torch_client_is_recorded_for_the_launcher() {
    with_deadline(30, || {
        let auth = phalanx_store::Auth::random("refuse");
        let config = ServerConfig::default().with_torch_clients(TorchClients::Refuse);
        let server = StoreServer::bind_with(localhost(), auth.clone(), config).unwrap();
        let addr = server.local_addr().to_string();
        // A stray zero byte is not a PyTorch client: closed, nothing recorded.
        let mut stray = TcpStream::connect(server.local_addr()).unwrap();
        stray.write_all(&[0, 1, 2, 3, 4]).unwrap();
        assert_closed_by_server(&mut stray);
        assert!(!server.local_store().check(&[keys::TORCH_REFUSED]).unwrap());
        assert!(TorchStore::connect(&addr, Duration::from_secs(2)).is_err());
        let why = server.local_store().get(keys::TORCH_REFUSED).unwrap();
        let why = String::from_utf8(why).unwrap();
        assert!(why.contains("no authentication"), "{why}");
        still_serves(&server, &auth);
    });
}

/// A validated PyTorch connection that then sends `bytes`.
fn torch_conn(server: &StoreServer) -> TcpStream {
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let validate = torch::encode_request(&Request::Validate {
        magic: torch::VALIDATION_MAGIC,
    })
    .unwrap();
    s.write_all(&validate).unwrap();
    s
}

#[test]
fn hostile_bytes_on_the_torch_path_close_that_connection_only() {
    with_deadline(60, || {
        let (server, auth) = server();
        let addr = server.local_addr().to_string();
        let good = TorchStore::connect(&addr, T).unwrap();
        good.set("/kept", b"1").unwrap();

        // A wrong magic, an unknown query, a key longer than the limit, a count past the
        // limit, and a second VALIDATE: each closes its connection.
        let mut wrong = TcpStream::connect(server.local_addr()).unwrap();
        wrong.write_all(&[0, 1, 2, 3, 4]).unwrap();
        assert_closed_by_server(&mut wrong);
        for bad in [
            vec![200u8],
            [vec![1u8], u64::MAX.to_le_bytes().to_vec()].concat(),
            [vec![6u8], (1u64 << 40).to_le_bytes().to_vec()].concat(),
            vec![0, 0xce, 0xf7, 0x85, 0x3c],
        ] {
            let mut s = torch_conn(&server);
            s.write_all(&bad).unwrap();
            assert_closed_by_server(&mut s);
        }

        // A value announced at 60 MiB of which 1 KiB arrives: memory follows the bytes sent,
        // and the server goes on; the connection ends when the client leaves.
        let mut s = torch_conn(&server);
        let mut head = vec![1u8];
        head.extend_from_slice(&2u64.to_le_bytes());
        head.extend_from_slice(b"/v");
        head.extend_from_slice(&(60u64 << 20).to_le_bytes());
        head.extend_from_slice(&[7u8; 1024]);
        s.write_all(&head).unwrap();
        assert_eq!(good.get("/kept").unwrap(), b"1");
        drop(s);

        // Random bytes after VALIDATE, 300 connections: no crash, nothing half-written.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..300 {
            let mut s = torch_conn(&server);
            let len = (seed % 64) as usize;
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = s.write_all(&junk);
            let _ = s.shutdown(std::net::Shutdown::Write);
            let _ = s.read(&mut [0u8; 64]);
        }
        assert_eq!(good.get("/kept").unwrap(), b"1");
        assert!(!server.torch_store().check(&["/v"]).unwrap());
        still_serves(&server, &auth);
    });
}

#[test]
fn torch_store_at_a_port_that_is_not_pytorch_says_so() {
    with_deadline(30, || {
        // A port that accepts and never answers PyTorch's ping is named as "not a PyTorch
        // TCPStore" within the connect timeout, rather than hanging.
        let listener = std::net::TcpListener::bind(localhost()).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let silent = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let _ = s.read_to_end(&mut Vec::new()); // until the client gives up
        });
        let start = Instant::now();
        match TorchStore::connect(&addr, Duration::from_secs(1)) {
            Err(Error::Protocol { reason, .. }) => {
                assert!(reason.contains("not a PyTorch TCPStore"), "{reason}")
            }
            other => panic!("expected a protocol error, got {other:?}"),
        }
        assert!(start.elapsed() < Duration::from_secs(5));
        silent.join().unwrap();
    });
}

fn send(s: &mut TcpStream, req: &Request<'_>) {
    s.write_all(&torch::encode_request(req).unwrap()).unwrap();
}

#[test]
fn waits_cancel_cleanly_and_replies_stay_bounded() {
    with_deadline(60, || {
        let (server, auth) = server();
        let addr = server.local_addr().to_string();
        let good = TorchStore::connect(&addr, T).unwrap();

        // A barrier left by CANCEL_WAIT takes its arrival back (a retry must not count twice).
        let mut s = torch_conn(&server);
        send(
            &mut s,
            &Request::Barrier {
                key: "/b",
                world_size: 2,
            },
        );
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(server.torch_store().get("/b").unwrap(), b"1");
        send(&mut s, &Request::CancelWait);
        let mut status = [0u8; 1];
        s.read_exact(&mut status).unwrap();
        assert_eq!(status[0], torch::WAIT_CANCELED);
        assert!(common::eventually(5, || server
            .torch_store()
            .get("/b")
            .unwrap()
            == b"0"));

        // After a wait ended by the client's next bytes, only CANCEL_WAIT may follow.
        let mut s = torch_conn(&server);
        send(
            &mut s,
            &Request::Wait {
                keys: vec!["/never"],
            },
        );
        std::thread::sleep(Duration::from_millis(100));
        send(
            &mut s,
            &Request::Set {
                key: "/x",
                value: b"1",
            },
        );
        assert_closed_by_server(&mut s);
        assert!(!good.check(&["/x"]).unwrap());

        // One 1 MiB value named 300 times: a 6 KiB query for a 300 MiB reply is refused.
        good.set("/big", &vec![7u8; 1 << 20]).unwrap();
        assert!(good.check(&["/big"]).unwrap()); // a set has no reply: make sure it landed
        let mut s = torch_conn(&server);
        send(
            &mut s,
            &Request::MultiGet {
                keys: vec!["/big"; 300],
            },
        );
        assert_closed_by_server(&mut s);
        assert_eq!(good.get("/big").unwrap().len(), 1 << 20);
        still_serves(&server, &auth);
    });
}
