//! Round-trip latency of store operations over loopback: `cargo run --release -p phalanx-store
//! --example store_latency [ops]`.

use std::time::{Duration, Instant};

use phalanx_store::{Auth, Store, StoreServer, TcpStore};

fn main() -> phalanx_store::Result<()> {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let auth = Auth::random("latency");
    let server = StoreServer::bind(
        "127.0.0.1:0".parse().expect("literal address"),
        auth.clone(),
    )?;
    let addr = server.local_addr().to_string();
    let start = Instant::now();
    let store = TcpStore::connect(&addr, &auth, Duration::from_secs(10))?;
    println!(
        "first connect:       {:>8.1} us",
        start.elapsed().as_secs_f64() * 1e6
    );
    let start = Instant::now();
    for _ in 0..100 {
        drop(TcpStore::connect(&addr, &auth, Duration::from_secs(10))?);
    }
    println!(
        "connect + handshake: {:>8.1} us",
        start.elapsed().as_secs_f64() * 1e6 / 100.0
    );
    let time = |name: &str,
                f: &mut dyn FnMut(u32) -> phalanx_store::Result<()>|
     -> phalanx_store::Result<()> {
        let start = Instant::now();
        for i in 0..n {
            f(i)?;
        }
        println!(
            "{name:<20} {:>8.1} us/op",
            start.elapsed().as_secs_f64() * 1e6 / f64::from(n)
        );
        Ok(())
    };
    time("set", &mut |i| {
        store.set(&format!("k{}", i % 100), b"value")
    })?;
    time("get (present)", &mut |i| {
        store.get(&format!("k{}", i % 100)).map(drop)
    })?;
    time("add", &mut |_| store.add("counter", 1).map(drop))?;
    time("check", &mut |_| store.check(&["k1", "k2"]).map(drop))?;
    Ok(())
}
