//! A `StoreServer` serves its clients from a thread per core at most (Note [One event loop for
//! every connection]), and dropping it leaves no thread behind: authenticated clients, clients
//! blocked in `get`, and connections stuck in the handshake all end.
//! (Its own test binary, not a module of the crate's `store` binary: it counts this process's
//! store threads, so no other test's server may be running.)

#[path = "store/common/mod.rs"]
mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::with_deadline;
use phalanx_store::{Auth, Store, StoreServer, TcpStore};

/// Threads of this process whose name starts with `phalanx-store` (Linux only; elsewhere 0).
fn store_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.starts_with("phalanx-store"))
        })
        .count()
}

#[test]
fn shutdown_joins_every_thread() {
    with_deadline(30, || {
        let auth = Auth::random("threads");
        let server = StoreServer::bind("127.0.0.1:0".parse().unwrap(), auth.clone()).unwrap();
        let addr = server.local_addr().to_string();
        let clients: Vec<TcpStore> = (0..16)
            .map(|_| TcpStore::connect(&addr, &auth, Duration::from_secs(60)).unwrap())
            .collect();
        for c in &clients {
            c.add("n", 1).unwrap();
        }
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let c = TcpStore::connect(&addr, &auth, Duration::from_secs(60)).unwrap();
                std::thread::spawn(move || c.get("never"))
            })
            .collect();
        let _half_open = TcpStream::connect(server.local_addr()).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        if std::path::Path::new("/proc/self/task").exists() {
            // 16 clients, 4 waiters and 1 in the handshake, all on the event loop's threads:
            // one per core, at most 4.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            assert_eq!(server.num_connections(), 21);
            assert_eq!(store_threads(), cores.min(4));
        }
        let start = Instant::now();
        server.shutdown();
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "shutdown took {:?}",
            start.elapsed()
        );
        // pthread_join returns once the kernel clears the thread's tid, a moment before the
        // task leaves /proc/self/task: allow that window, nothing longer.
        let joined = Instant::now();
        while store_threads() > 0 && joined.elapsed() < Duration::from_millis(500) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(store_threads(), 0, "threads outlived the server");
        for w in waiters {
            assert!(w.join().unwrap().is_err());
        }
        assert!(
            clients[0].add("n", 1).is_err(),
            "a stopped server must not answer"
        );
    });
}
