//! Tests of the agent rendezvous (`claims/mod.rs`).
use super::*;
use phalanx_store::HashStore;

fn claim(nproc: u32, nnodes: u32, nonce: &str) -> Claim {
    Claim {
        nproc,
        nnodes,
        min_nnodes: 0,
        nonce: nonce.into(),
        host: format!("host-{nonce}"),
        program: String::new(),
    }
}

#[test]
fn three_nodes_get_disjoint_ranks() {
    let store = HashStore::new();
    let sizes = [2, 3, 1];
    let handles: Vec<_> = (0..3u32)
        .map(|g| {
            let s = store.clone();
            std::thread::spawn(move || {
                let c = claim(sizes[g as usize], 3, &g.to_string());
                rendezvous(&s, 0, g, &c, Duration::from_secs(10), &mut || false)
                    .unwrap()
                    .unwrap()
            })
        })
        .collect();
    let layouts: Vec<Layout> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut ranks: Vec<u32> = layouts
        .iter()
        .flat_map(|l| (0..l.local_world_size).map(|lr| l.rank(lr)))
        .collect();
    ranks.sort();
    assert_eq!(ranks, (0..6).collect::<Vec<_>>());
    assert!(layouts
        .iter()
        .all(|l| l.world_size == 6 && l.group_world_size == 3));
    assert_eq!(layouts[1].base_rank, 2);
}

#[test]
fn outcomes_round_trip_and_garbage_is_refused() {
    for o in [
        Outcome::Sizes(vec![2, 3, 1]),
        Outcome::Mismatch([(0, 2), (5, 7)]),
    ] {
        assert_eq!(Outcome::parse(o.to_string().as_bytes()), Some(o));
    }
    for bad in [
        "",
        "sizes",
        "sizes x",
        "mismatch 1 2 3",
        "layout 1",
        "sizes -1",
    ] {
        assert_eq!(Outcome::parse(bad.as_bytes()), None, "{bad:?}");
    }
}

/// 1,024 agents (threads with their own authenticated connections) through one real store
/// server: disjoint ranks, and store requests linear in the number of agents (Note [Agent
/// rendezvous traffic]); the time is printed, not asserted.
#[test]
fn a_thousand_agents_rendezvous_with_linear_store_traffic() {
    use phalanx_store::{Auth, StoreServer, TcpStore};
    let n = 1024u32;
    let auth = Auth::random("agents");
    let server = StoreServer::bind("127.0.0.1:0".parse().unwrap(), auth.clone()).unwrap();
    let addr = server.local_addr().to_string();
    let t = Duration::from_secs(60);
    let clients: Vec<TcpStore> = (0..n)
        .map(|_| TcpStore::connect(&addr, &auth, t).unwrap())
        .collect();
    let before = server.stats();
    let start = Instant::now();
    let handles: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(g, s)| {
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let c = claim(1, n, &g.to_string());
                    rendezvous(&s, 0, g as u32, &c, t, &mut || false)
                        .unwrap()
                        .unwrap()
                })
                .unwrap()
        })
        .collect();
    let mut ranks: Vec<u32> = handles
        .into_iter()
        .map(|h| h.join().unwrap().rank(0))
        .collect();
    let requests = server.stats().requests - before.requests;
    println!(
        "{n} agents: rendezvous in {:.3} s, {requests} store requests",
        start.elapsed().as_secs_f64()
    );
    ranks.sort();
    assert_eq!(ranks, (0..n).collect::<Vec<_>>());
    // compare_set, add, node 0's claim (check + get), wait(s), get; one multi_get + set.
    assert!(
        requests <= 12 * u64::from(n),
        "{requests} requests for {n} agents"
    );
}

#[test]
fn duplicate_node_rank_is_named() {
    let store = HashStore::new();
    store
        .compare_set(
            &phalanx_store::keys::agent(0, "node/1"),
            b"",
            &serde_json::to_vec(&claim(1, 2, "a")).unwrap(),
        )
        .unwrap();
    let e = rendezvous(
        &store,
        0,
        1,
        &claim(1, 2, "b"),
        Duration::from_secs(1),
        &mut || false,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("--node-rank 1") && e.contains("host-a"), "{e}");
}

#[test]
fn inconsistent_nnodes_is_named() {
    let store = HashStore::new();
    let s2 = store.clone();
    let t = std::thread::spawn(move || {
        rendezvous(
            &s2,
            0,
            1,
            &claim(1, 3, "b"),
            Duration::from_secs(2),
            &mut || false,
        )
    });
    let e = rendezvous(
        &store,
        0,
        0,
        &claim(1, 2, "a"),
        Duration::from_secs(2),
        &mut || false,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("--nnodes 3") && e.contains("WORLD_SIZE"), "{e}");
    let _ = t.join();
}

#[test]
fn missing_nodes_are_listed_on_timeout() {
    let store = HashStore::new();
    let e = rendezvous(
        &store,
        4,
        0,
        &claim(1, 3, "a"),
        Duration::from_millis(300),
        &mut || false,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("round 4") && e.contains("[1, 2]"), "{e}");
}
