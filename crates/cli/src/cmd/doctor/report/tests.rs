//! [`build`](super::build) on hand-made results: merging both ends of a link, the slowest
//! link, and each check failing for the reason it names.

use super::*;
use crate::cmd::doctor::data::{Clock, Half, IfnameFrom, Mesh, Reach, Rtt, ShmProbe, Status};

fn limits() -> Limits {
    Limits {
        max_clock_skew_us: 1e6,
        min_gbps: None,
        bandwidth_ms: 200.0,
        bandwidth_bytes: 64 << 20,
    }
}

/// `n` ranks, one per node, every link at `gbps[a][b]` from a to b, RTT 100 µs, clocks equal.
fn results(n: usize, gbps: impl Fn(usize, usize) -> f64) -> Vec<RankResult> {
    (0..n)
        .map(|r| RankResult {
            info: RankInfo {
                rank: r,
                node_rank: r,
                local_rank: 0,
                local_world_size: 1,
                hostname: format!("h{r}"),
                ifname: Some("eth0".into()),
                ifname_from: None,
                ip: Some(format!("10.0.0.{}", r + 1)),
                port: Some(4000 + r as u16),
                if_error: None,
                shm: ShmProbe {
                    free_bytes: Some(1 << 30),
                    segment_bytes: 1 << 20,
                    error: None,
                },
            },
            reach: Reach {
                out: vec![None; n],
                inc: vec![true; n],
            },
            halves: (0..n)
                .filter(|&p| p != r)
                .map(|p| Half {
                    peer: p,
                    rtt: (r < p).then_some(Rtt {
                        median_us: 100.0,
                        min_us: 90.0,
                        samples: 50,
                    }),
                    tx_gbps: Some(gbps(r, p)),
                    tx_bytes: 1 << 20,
                    clock: (p == 0).then_some(Clock {
                        offset_us: 5.0 * r as f64,
                        rtt_us: 100.0,
                    }),
                    error: None,
                })
                .collect(),
            mesh: Some(Mesh {
                error: None,
                shared_memory: false,
            }),
        })
        .collect()
}

fn status(r: &Report, name: &str) -> (Status, String) {
    let c = r.checks.iter().find(|c| c.name == name).unwrap();
    (c.status, c.detail.clone())
}

#[test]
fn the_slowest_link_is_the_one_with_the_slowest_direction() {
    // 1 → 3 is fast but 3 → 1 is the slowest direction anywhere.
    let rs = results(4, |a, b| match (a, b) {
        (3, 1) => 0.9,
        (0, 2) => 0.95,
        _ => 9.0,
    });
    let r = build(&rs, limits());
    assert!(r.ok, "{r:#?}");
    assert_eq!(r.links.len(), 6);
    assert_eq!(r.slowest_link, Some([1, 3]));
    let l = r.links.iter().find(|l| (l.a, l.b) == (1, 3)).unwrap();
    assert_eq!((l.a_to_b_gbps, l.b_to_a_gbps), (Some(9.0), Some(0.9)));
    assert_eq!(
        r.verdict,
        "slowest link: rank 1 (node 1, host h1, eth0 10.0.0.2) ↔ rank 3 (node 3, host h3, \
         eth0 10.0.0.4): 0.900 Gbit/s, 100 µs RTT"
    );
    assert_eq!(r.ranks[3].clock_offset_us, Some(15.0));
    assert_eq!(r.ranks[0].clock_offset_us, Some(0.0));
    assert!(
        r.checks.iter().all(|c| c.status == Status::Ok),
        "{:#?}",
        r.checks
    );
}

#[test]
fn an_unreachable_pair_fails_naming_both_ranks_and_the_address() {
    let mut rs = results(3, |_, _| 5.0);
    rs[1].reach.out[2] = Some("connect to 10.0.0.3:4002: No route to host".into());
    rs[2].reach.inc[1] = false;
    rs[1].halves.retain(|h| h.peer != 2);
    rs[2].halves.retain(|h| h.peer != 1);
    for r in &mut rs {
        r.mesh = None;
    }
    let r = build(&rs, limits());
    assert!(!r.ok);
    let (s, d) = status(&r, "reachability");
    assert_eq!(s, Status::Fail);
    assert_eq!(
        d,
        "rank 1 → rank 2 (10.0.0.3:4002): connect to 10.0.0.3:4002: No route to host"
    );
    assert_eq!(status(&r, "process group").0, Status::Skip);
    assert!(
        r.verdict
            .starts_with("FAILED (reachability): rank 1 → rank 2"),
        "{}",
        r.verdict
    );
    let l = r.links.iter().find(|l| (l.a, l.b) == (1, 2)).unwrap();
    assert!(!l.reachable && l.gbps().is_none());
    // The links that work are still the candidates for the slowest.
    assert!(r.slowest_link.is_some());
}

#[test]
fn clock_skew_beyond_the_limit_fails_naming_the_rank() {
    let mut rs = results(3, |_, _| 5.0);
    rs[2].halves[0].clock = Some(Clock {
        offset_us: -2.5e6,
        rtt_us: 80.0,
    });
    let r = build(&rs, limits());
    let (s, d) = status(&r, "clock");
    assert_eq!(s, Status::Fail);
    assert!(
        d.contains("rank 2, -2.50 s") && d.contains("--max-clock-skew 1.00 s"),
        "{d}"
    );
    assert!(!r.ok);
}

#[test]
fn min_bandwidth_fails_the_links_below_it() {
    let rs = results(3, |a, b| if a + b == 3 { 0.5 } else { 5.0 });
    let r = build(
        &rs,
        Limits {
            min_gbps: Some(1.0),
            ..limits()
        },
    );
    let (s, d) = status(&r, "links");
    assert_eq!(s, Status::Fail);
    assert_eq!(
        d,
        "below --min-bandwidth 1.00 Gbit/s: rank 1 ↔ rank 2: 0.500 Gbit/s"
    );
}

#[test]
fn a_loopback_address_in_a_multi_node_job_fails_the_interfaces_check() {
    let mut rs = results(2, |_, _| 5.0);
    rs[1].info.ifname = Some("lo".into());
    rs[1].info.ip = Some("127.0.1.1".into());
    let (s, d) = status(&build(&rs, limits()), "interfaces");
    assert_eq!(s, Status::Fail);
    assert!(
        d.starts_with("loopback address in a 2-node job") && d.contains("rank 1 (lo 127.0.1.1)"),
        "{d}"
    );
}

#[test]
fn the_interfaces_check_says_which_variable_chose_each_interface() {
    let mut rs = results(3, |_, _| 5.0);
    let nccl = IfnameFrom {
        var: "NCCL_SOCKET_IFNAME".into(),
        value: "eth1".into(),
    };
    for r in &mut rs[1..] {
        r.info.ifname = Some("eth1".into());
        r.info.ifname_from = Some(nccl.clone());
    }
    let (s, d) = status(&build(&rs, limits()), "interfaces");
    assert_eq!(s, Status::Ok);
    assert_eq!(
        d,
        "every rank has an address (interfaces: eth0 by the route to MASTER_ADDR; \
         eth1 from NCCL_SOCKET_IFNAME=eth1)"
    );
    // --json carries the variable and its value per rank; null for the route.
    let json = serde_json::to_value(build(&rs, limits())).unwrap();
    assert_eq!(json["ranks"][0]["ifname_from"], serde_json::Value::Null);
    assert_eq!(json["ranks"][2]["ifname_from"]["var"], "NCCL_SOCKET_IFNAME");
    assert_eq!(json["ranks"][2]["ifname_from"]["value"], "eth1");
}

#[test]
fn a_loopback_interface_chosen_by_a_variable_names_that_variable() {
    let mut rs = results(2, |_, _| 5.0);
    rs[1].info.ifname = Some("lo".into());
    rs[1].info.ip = Some("127.0.0.1".into());
    rs[1].info.ifname_from = Some(IfnameFrom {
        var: "GLOO_SOCKET_IFNAME".into(),
        value: "lo".into(),
    });
    let (s, d) = status(&build(&rs, limits()), "interfaces");
    assert_eq!(s, Status::Fail);
    assert!(
        d.contains("rank 1 (lo 127.0.0.1) from GLOO_SOCKET_IFNAME=lo")
            && d.contains("(GLOO_SOCKET_IFNAME names an interface the other hosts cannot reach)"),
        "{d}"
    );
}

#[test]
fn a_measurement_error_fails_the_links_check() {
    let mut rs = results(2, |_, _| 5.0);
    rs[1].halves[0].error = Some("Connection reset by peer (os error 104)".into());
    rs[1].halves[0].tx_gbps = None;
    let r = build(&rs, limits());
    let (s, d) = status(&r, "links");
    assert_eq!(s, Status::Fail);
    assert_eq!(
        d,
        "measuring rank 1 ↔ rank 0: Connection reset by peer (os error 104)"
    );
    assert_eq!(r.slowest_link, None);
    assert!(
        r.verdict.ends_with("no link could be measured"),
        "{}",
        r.verdict
    );
}
