//! Helpers shared by the store's integration tests: deadlines and raw authenticated sockets.
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use phalanx_store::wire::{ClientHandshake, SERVER_HELLO_LEN};
use phalanx_store::{Auth, ServerConfig, Store, StoreServer, TcpStore};

/// Runs `body` on a thread and fails the test if it has not finished within `secs`.
pub fn with_deadline<T: Send + 'static>(secs: u64, body: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(body());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => {
            handle.join().expect("test body thread");
            v
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The body panicked: surface its panic.
            std::panic::resume_unwind(handle.join().expect_err("body panicked"))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("test exceeded its {secs} s deadline"),
    }
}

/// A raw socket that has passed the handshake, for sending hand-made frames.
pub fn raw_authenticated(addr: SocketAddr, auth: &Auth) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let hs = ClientHandshake::new(auth, [7; 32]);
    s.write_all(&hs.hello().unwrap()).unwrap();
    let mut hello = [0u8; SERVER_HELLO_LEN];
    s.read_exact(&mut hello).unwrap();
    let proof = hs.on_server_hello(&hello).unwrap();
    s.write_all(&proof).unwrap();
    let mut verdict = [0u8; 1];
    s.read_exact(&mut verdict).unwrap();
    hs.on_verdict(verdict).unwrap();
    s
}

/// Asserts the server closes `s` (EOF or reset) within a few seconds, reading whatever it sends.
pub fn assert_closed_by_server(s: &mut TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("server did not close the connection: {e}"),
        }
    }
}

/// Polls `cond` every 10 ms for up to `secs`; whether it became true.
pub fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

pub const T: Duration = Duration::from_secs(10);

pub fn server() -> (StoreServer, Auth) {
    let auth = Auth::random("hardening");
    let config = ServerConfig::default().with_handshake_timeout(Duration::from_millis(500));
    (
        StoreServer::bind_with(localhost(), auth.clone(), config).unwrap(),
        auth,
    )
}

pub fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A good client still gets served.
pub fn still_serves(server: &StoreServer, auth: &Auth) {
    let s = TcpStore::connect(&server.local_addr().to_string(), auth, T).unwrap();
    let n = s.add("still_serves", 1).unwrap();
    assert!(n >= 1);
}
