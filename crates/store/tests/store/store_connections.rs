//! Connection lifecycle of the TCP store: retrying until the server is up, giving up with the
//! address named, a taken port, 1,024 concurrent clients, shutdown with waiters, clients that
//! leave mid-wait, reconnecting.

use crate::common;

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{eventually, localhost, raw_authenticated, server, with_deadline, T};
use phalanx_store::wire::{self, Request};
use phalanx_store::{Auth, Error, Store, StoreServer, TcpStore};

#[test]
fn connect_retries_until_the_server_comes_up() {
    with_deadline(30, || {
        let port = TcpListener::bind(localhost())
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let auth = Auth::random("late");
        let a = auth.clone();
        let starter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            StoreServer::bind(addr, a).unwrap()
        });
        let start = Instant::now();
        let s = TcpStore::connect(&addr.to_string(), &auth, T).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(250));
        assert_eq!(s.add("x", 1).unwrap(), 1);
        drop(starter.join().unwrap());
    });
}

#[test]
fn connect_gives_up_naming_the_address() {
    with_deadline(30, || {
        let port = TcpListener::bind(localhost())
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let start = Instant::now();
        match TcpStore::connect(&addr, &Auth::random("j"), Duration::from_millis(400)) {
            Err(e @ Error::Connect { .. }) => {
                assert!(e.to_string().contains(&addr), "{e}");
            }
            other => panic!("{other:?}"),
        }
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(3),
            "{took:?}"
        );
    });
}

#[test]
fn port_in_use_names_the_port_and_owner() {
    with_deadline(30, || {
        let holder = TcpListener::bind(localhost()).unwrap();
        let addr = holder.local_addr().unwrap();
        let err = StoreServer::bind(addr, Auth::random("j")).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&addr.port().to_string()), "{text}");
        if std::path::Path::new("/proc/net/tcp").exists() {
            assert!(
                text.contains(&format!("pid {}", std::process::id())),
                "{text}"
            );
        }
    });
}

#[test]
fn thousand_twenty_four_concurrent_clients() {
    with_deadline(60, || {
        const N: usize = 1024;
        let (server, auth) = server();
        let addr = server.local_addr().to_string();
        let start = Instant::now();
        // Connect everyone first (from 32 threads), so all 1,024 are open at once.
        let clients: Vec<TcpStore> = std::thread::scope(|sc| {
            let handles: Vec<_> = (0..32)
                .map(|_| {
                    sc.spawn(|| {
                        (0..N / 32)
                            .map(|_| TcpStore::connect(&addr, &auth, T).unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        assert_eq!(clients.len(), N);
        assert_eq!(server.num_connections(), N);
        let clients = Arc::new(clients);
        let barrier = Arc::new(Barrier::new(32));
        std::thread::scope(|sc| {
            for t in 0..32 {
                let (clients, barrier) = (clients.clone(), barrier.clone());
                sc.spawn(move || {
                    barrier.wait();
                    for c in clients.iter().skip(t).step_by(32) {
                        c.add("arrived", 1).unwrap();
                    }
                });
            }
        });
        assert_eq!(clients[0].get("arrived").unwrap(), N.to_string().as_bytes());
        let took = start.elapsed();
        eprintln!("1024 clients connected and added in {took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        drop(clients);
        assert!(eventually(10, || server.num_connections() == 0));
    });
}

#[test]
fn shutdown_releases_blocked_clients() {
    with_deadline(30, || {
        let (server, auth) = server();
        let c = TcpStore::connect(
            &server.local_addr().to_string(),
            &auth,
            Duration::from_secs(60),
        )
        .unwrap();
        let waiter = std::thread::spawn(move || c.get("never"));
        std::thread::sleep(Duration::from_millis(200));
        let start = Instant::now();
        server.shutdown();
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "shutdown took {:?}",
            start.elapsed()
        );
        assert!(waiter.join().unwrap().is_err());
    });
}

#[test]
fn client_leaving_during_a_wait_frees_its_thread() {
    with_deadline(30, || {
        let (server, auth) = server();
        let mut raw = raw_authenticated(server.local_addr(), &auth);
        raw.write_all(
            &wire::encode_request(&Request::Get {
                key: "never",
                timeout_ms: 600_000,
            })
            .unwrap(),
        )
        .unwrap();
        assert!(eventually(2, || server.num_connections() == 1));
        drop(raw);
        assert!(
            eventually(5, || server.num_connections() == 0),
            "waiting thread outlived its client"
        );
    });
}

#[test]
fn local_store_shares_the_servers_keys() {
    with_deadline(30, || {
        let (server, auth) = server();
        let remote = TcpStore::connect(&server.local_addr().to_string(), &auth, T).unwrap();
        let local = server.local_store();
        let t = std::thread::spawn(move || remote.get("from_local"));
        local.set("from_local", b"hi").unwrap();
        assert_eq!(t.join().unwrap().unwrap(), b"hi");
    });
}

#[test]
fn a_client_reconnects_after_its_connection_broke() {
    with_deadline(30, || {
        let (server, auth) = server();
        let s = TcpStore::connect(&server.local_addr().to_string(), &auth, T).unwrap();
        s.set_timeout(Duration::from_millis(100));
        // A client-side timeout (the server answers Timeout) leaves the connection usable.
        assert!(matches!(s.get("missing"), Err(Error::Timeout { .. })));
        s.set("k", b"v").unwrap();
        let clone = s.try_clone().unwrap();
        assert_eq!(clone.timeout(), Duration::from_millis(100));
        assert_eq!(clone.get("k").unwrap(), b"v");
    });
}
