//! The link protocol over loopback and the round-robin schedule.

use super::*;

#[test]
fn rounds_cover_every_pair_once_with_each_rank_once_per_round() {
    for n in [0, 1, 2, 3, 4, 5, 7, 8, 13] {
        let rs = rounds(n);
        let mut seen = std::collections::BTreeSet::new();
        for r in &rs {
            let mut busy = vec![false; n];
            for &(a, b) in r {
                assert!(a < b && b < n, "n={n} pair ({a},{b})");
                assert!(!busy[a] && !busy[b], "n={n}: a rank twice in one round");
                busy[a] = true;
                busy[b] = true;
                assert!(seen.insert((a, b)), "n={n}: ({a},{b}) twice");
            }
        }
        assert_eq!(seen.len(), n * n.saturating_sub(1) / 2, "n={n}");
        assert_eq!(rs.len(), if n < 2 { 0 } else { n - 1 + n % 2 }, "n={n}");
    }
}

#[test]
fn two_ranks_measure_over_loopback() {
    let bw = BwLimits {
        time: Duration::from_millis(20),
        bytes: 4 << 20,
    };
    let l0 = TcpListener::bind("127.0.0.1:0").unwrap();
    let l1 = TcpListener::bind("127.0.0.1:0").unwrap();
    let addrs = vec![
        Some(l0.local_addr().unwrap()),
        Some(l1.local_addr().unwrap()),
    ];
    let a2 = addrs.clone();
    let t = std::thread::spawn(move || {
        let mut p = connect_all(1, &a2, Some(l1), 7, Duration::from_secs(5));
        let h = measure(1, 0, p.conns[0].as_mut().unwrap(), bw);
        (p.reach, h)
    });
    let mut p = connect_all(0, &addrs, Some(l0), 7, Duration::from_secs(5));
    let h0 = measure(0, 1, p.conns[1].as_mut().unwrap(), bw);
    let (reach1, h1) = t.join().unwrap();
    assert_eq!(p.reach.out, vec![None, None]);
    assert_eq!(reach1.inc, vec![true, true]);
    assert!(h0.error.is_none() && h1.error.is_none(), "{h0:?} {h1:?}");
    let rtt = h0.rtt.unwrap();
    assert!(rtt.samples == PINGS && rtt.min_us > 0.0 && rtt.min_us <= rtt.median_us);
    assert!(h0.tx_gbps.unwrap() > 0.0 && h1.tx_gbps.unwrap() > 0.0);
    assert!(h0.tx_bytes >= CHUNK as u64);
    // Same host, same clock: the offset is within the exchange's delay.
    let c = h1.clock.unwrap();
    assert!(c.offset_us.abs() <= c.rtt_us.max(1.0) + 1000.0, "{c:?}");
    assert!(h0.clock.is_none());
}

#[test]
fn an_address_nobody_listens_on_is_unreachable_within_the_timeout() {
    let l0 = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let addrs = vec![Some(l0.local_addr().unwrap()), Some(dead_addr)];
    let t = Instant::now();
    let p = connect_all(0, &addrs, Some(l0), 1, Duration::from_millis(300));
    assert!(t.elapsed() < Duration::from_secs(3));
    let e = p.reach.out[1].as_deref().unwrap();
    assert!(e.contains(&dead_addr.to_string()), "{e}");
    assert!(!p.reach.inc[1]);
}
