//! 1,024 ranks (threads, each with its own authenticated TCP connection) rendezvous through one
//! real store server: every rank gets the same peer table, and the store's request count grows
//! linearly with the world size (Note [Leader gather] in bootstrap/mod.rs). The wall time is printed
//! here and measured by `phalanx bench rendezvous`, not asserted (shared, noisy machines).

use std::{
    sync::{Arc, Barrier},
    time::{Duration, Instant},
};

use phalanx_pg::bootstrap::{exchange, vote, Peer};
use phalanx_store::{Auth, StoreServer, TcpStore};

fn peer(r: usize) -> Peer {
    Peer {
        // One address per host of 8 ranks, as on a cluster.
        addr: format!("10.{}.{}.1:{}", r / 8 / 250, r / 8 % 250, 20000 + r)
            .parse()
            .unwrap(),
        host: format!("boot-id/host-{}/0", r / 8),
    }
}

#[test]
fn a_thousand_ranks_rendezvous_with_linear_store_traffic() {
    let world = 1024;
    let auth = Auth::random("scale");
    let server = StoreServer::bind("127.0.0.1:0".parse().unwrap(), auth.clone()).unwrap();
    let addr = server.local_addr().to_string();
    let timeout = Duration::from_secs(60);
    // Connect first, so that the counters and the clock cover the rendezvous alone.
    let clients: Vec<TcpStore> = (0..world)
        .map(|_| TcpStore::connect(&addr, &auth, timeout).unwrap())
        .collect();
    let before = server.stats();
    let start = Arc::new(Barrier::new(world + 1));
    let handles: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(r, store)| {
            let start = start.clone();
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    start.wait();
                    let peers = exchange(&store, r, world, &peer(r), timeout).unwrap();
                    let ok = vote(&store, "shm", r, world, true, timeout).unwrap();
                    (peers, ok)
                })
                .unwrap()
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    let expected: Vec<(std::net::SocketAddr, u32)> =
        (0..world).map(|r| (peer(r).addr, (r / 8) as u32)).collect();
    for h in handles {
        let (peers, ok) = h.join().unwrap();
        assert!(ok);
        let got: Vec<_> = (0..peers.len())
            .map(|r| (peers.addr(r), peers.host(r)))
            .collect();
        assert!(got == expected, "a rank got a different peer table");
    }
    let elapsed = t0.elapsed();
    let after = server.stats();
    let requests = after.requests - before.requests;
    let bytes_out = after.bytes_out - before.bytes_out;
    println!(
        "{world} ranks: rendezvous + vote in {:.3} s, {requests} store requests, {:.1} MB out",
        elapsed.as_secs_f64(),
        bytes_out as f64 / 1e6
    );
    // Per rank: set and a get that waits (exchange), set and a get that waits (vote); rank 0
    // waits for every key, reads them with one multi_get and sets the table or outcome instead
    // of its get. The old exchange read every peer's key on every rank: ~world² / 2 reads.
    assert!(
        requests <= 4 * world as u64 + 4,
        "{requests} requests for {world} ranks"
    );
    // Each rank reads the table once: 2 bytes per rank, an address and a run per host (Note
    // [A table read in place]); nothing else grows with the world.
    let table = 2 * world as u64 + 40 * (world as u64 / 8) + 64;
    assert!(
        bytes_out <= world as u64 * (table + 200),
        "{bytes_out} bytes out for {world} ranks"
    );
}
