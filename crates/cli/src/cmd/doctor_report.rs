//! Rank 0's side of `phalanx doctor`: every rank's [`RankResult`] in, the [`Report`] out
//! (links merged from both ends, checks, the slowest link, the verdict). Pure.

use super::doctor_data::{Check, Limits, LinkRow, RankInfo, RankResult, RankRow, Report, Status};

/// Assembles the report from every rank's result, indexed by rank.
pub(crate) fn build(results: &[RankResult], limits: Limits) -> Report {
    let n = results.len();
    let mut nodes: Vec<usize> = results.iter().map(|r| r.info.node_rank).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let ranks: Vec<RankRow> = results
        .iter()
        .map(|r| {
            // Rank 0 is the reference clock; its partners measured against it.
            let measured = r
                .halves
                .iter()
                .find(|h| h.peer == 0)
                .and_then(|h| h.clock)
                .map(|c| (c.offset_us, c.rtt_us));
            let (offset, rtt) = match (r.info.rank, measured) {
                (0, _) => (Some(0.0), Some(0.0)),
                (_, Some((o, t))) => (Some(o), Some(t)),
                _ => (None, None),
            };
            RankRow {
                info: r.info.clone(),
                uses_shared_memory: r
                    .mesh
                    .as_ref()
                    .filter(|m| m.error.is_none())
                    .map(|m| m.shared_memory),
                clock_offset_us: offset,
                clock_rtt_us: rtt,
            }
        })
        .collect();
    let links = links(results);
    let slowest = links
        .iter()
        .filter_map(|l| l.gbps().map(|g| (g, l)))
        .min_by(|x, y| x.0.total_cmp(&y.0))
        .map(|(_, l)| l);
    let checks = vec![
        interfaces(results, nodes.len()),
        reachability(&links),
        bandwidth(&links, &limits),
        mesh(results),
        shared_memory(results, nodes.len()),
        clock(&ranks, &limits),
    ];
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.name.as_str())
        .collect();
    let slow_line = match slowest {
        Some(l) => format!(
            "slowest link: {} ↔ {}: {}, {} RTT",
            who(&results[l.a].info),
            who(&results[l.b].info),
            gbps_text(l.gbps().unwrap_or(0.0)),
            l.rtt.map_or("?".into(), |r| us_text(r.median_us))
        ),
        None if n < 2 => "no links to measure (1 rank)".into(),
        None => "no link could be measured".into(),
    };
    let verdict = if failed.is_empty() {
        slow_line
    } else {
        let first = checks
            .iter()
            .find(|c| c.status == Status::Fail)
            .map(|c| c.detail.clone())
            .unwrap_or_default();
        format!("FAILED ({}): {first}; {slow_line}", failed.join(", "))
    };
    Report {
        world_size: n,
        nnodes: nodes.len(),
        limits,
        ranks,
        slowest_link: slowest.map(|l| [l.a, l.b]),
        links,
        ok: failed.is_empty(),
        checks,
        verdict,
    }
}

/// `rank 1 (node 1, host b, eth0 10.77.3.2)`.
pub(crate) fn who(i: &RankInfo) -> String {
    format!(
        "rank {} (node {}, host {}, {} {})",
        i.rank,
        i.node_rank,
        i.hostname,
        i.ifname.as_deref().unwrap_or("?"),
        i.ip.as_deref().unwrap_or("no address")
    )
}

/// `0.934 Gbit/s`, `12.3 Gbit/s`.
pub(crate) fn gbps_text(g: f64) -> String {
    if g >= 10.0 {
        format!("{g:.1} Gbit/s")
    } else if g >= 1.0 {
        format!("{g:.2} Gbit/s")
    } else {
        format!("{g:.3} Gbit/s")
    }
}

/// `142 µs`, `3.2 ms`, `1.50 s`.
pub(crate) fn us_text(us: f64) -> String {
    let a = us.abs();
    if a >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if a >= 1e4 {
        format!("{:.1} ms", us / 1e3)
    } else if a >= 100.0 {
        format!("{us:.0} µs")
    } else {
        format!("{us:.1} µs")
    }
}

fn addr(i: &RankInfo) -> String {
    match (&i.ip, i.port) {
        (Some(ip), Some(p)) if ip.contains(':') => format!("[{ip}]:{p}"),
        (Some(ip), Some(p)) => format!("{ip}:{p}"),
        _ => "no address".into(),
    }
}

fn links(results: &[RankResult]) -> Vec<LinkRow> {
    let n = results.len();
    let mut out = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            let (ra, rb) = (&results[a], &results[b]);
            let mut errors = Vec::new();
            for (x, y) in [(ra, rb), (rb, ra)] {
                let (i, j) = (x.info.rank, y.info.rank);
                if let Some(Some(e)) = x.reach.out.get(j) {
                    errors.push(format!("rank {i} → rank {j} ({}): {e}", addr(&y.info)));
                } else if !y.reach.inc.get(i).copied().unwrap_or(false) {
                    errors.push(format!(
                        "rank {i} → rank {j} ({}): connected, but rank {j} never saw it",
                        addr(&y.info)
                    ));
                }
            }
            let reachable = errors.is_empty();
            let ha = ra.halves.iter().find(|h| h.peer == b);
            let hb = rb.halves.iter().find(|h| h.peer == a);
            for (h, i, j) in [(ha, a, b), (hb, b, a)] {
                if let Some(e) = h.and_then(|h| h.error.as_ref()) {
                    errors.push(format!("measuring rank {i} ↔ rank {j}: {e}"));
                }
            }
            out.push(LinkRow {
                a,
                b,
                same_node: ra.info.node_rank == rb.info.node_rank,
                reachable,
                errors,
                rtt: ha.and_then(|h| h.rtt),
                a_to_b_gbps: ha.and_then(|h| h.tx_gbps),
                b_to_a_gbps: hb.and_then(|h| h.tx_gbps),
            });
        }
    }
    out
}

fn check(name: &str, status: Status, detail: String) -> Check {
    Check {
        name: name.into(),
        status,
        detail,
    }
}

fn interfaces(results: &[RankResult], nnodes: usize) -> Check {
    let bad: Vec<String> = results
        .iter()
        .filter_map(|r| {
            r.info
                .if_error
                .as_ref()
                .map(|e| format!("rank {}: {e}", r.info.rank))
        })
        .collect();
    if !bad.is_empty() {
        return check("interfaces", Status::Fail, bad.join("; "));
    }
    // The classic multi-host mistake: a hostname that resolves to 127.0.1.1, or a route to
    // MASTER_ADDR over loopback, so peers on other hosts are told to dial themselves.
    let lo: Vec<String> = results
        .iter()
        .filter(|r| {
            nnodes > 1
                && r.info
                    .ip
                    .as_deref()
                    .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
                    .is_some_and(|ip| ip.is_loopback())
        })
        .map(|r| format!("rank {}", r.info.rank))
        .collect();
    if !lo.is_empty() {
        return check(
            "interfaces",
            Status::Fail,
            format!(
                "{} listen on a loopback address in a {nnodes}-node job (set PHALANX_SOCKET_IFNAME)",
                lo.join(", ")
            ),
        );
    }
    let mut names: Vec<&str> = results
        .iter()
        .filter_map(|r| r.info.ifname.as_deref())
        .collect();
    names.sort_unstable();
    names.dedup();
    check(
        "interfaces",
        Status::Ok,
        format!(
            "every rank has an address (interfaces: {})",
            names.join(", ")
        ),
    )
}

fn reachability(links: &[LinkRow]) -> Check {
    let directions = 2 * links.len();
    let bad: Vec<String> = links
        .iter()
        .filter(|l| !l.reachable)
        .flat_map(|l| l.errors.iter().cloned())
        .collect();
    if bad.is_empty() {
        check(
            "reachability",
            Status::Ok,
            format!("{directions} of {directions} directions connected"),
        )
    } else {
        check("reachability", Status::Fail, bad.join("; "))
    }
}

fn bandwidth(links: &[LinkRow], limits: &Limits) -> Check {
    let errors: Vec<String> = links
        .iter()
        .filter(|l| l.reachable)
        .flat_map(|l| l.errors.iter().cloned())
        .collect();
    if !errors.is_empty() {
        return check("links", Status::Fail, errors.join("; "));
    }
    let measured: Vec<&LinkRow> = links.iter().filter(|l| l.gbps().is_some()).collect();
    if measured.is_empty() {
        return check("links", Status::Skip, "no link measured".into());
    }
    if let Some(min) = limits.min_gbps {
        let slow: Vec<String> = measured
            .iter()
            .filter(|l| l.gbps().unwrap_or(0.0) < min)
            .map(|l| {
                format!(
                    "rank {} ↔ rank {}: {}",
                    l.a,
                    l.b,
                    gbps_text(l.gbps().unwrap_or(0.0))
                )
            })
            .collect();
        if !slow.is_empty() {
            return check(
                "links",
                Status::Fail,
                format!(
                    "below --min-bandwidth {}: {}",
                    gbps_text(min),
                    slow.join(", ")
                ),
            );
        }
    }
    check(
        "links",
        Status::Ok,
        format!("{} links measured, both directions", measured.len()),
    )
}

fn mesh(results: &[RankResult]) -> Check {
    let errors: Vec<String> = results
        .iter()
        .filter_map(|r| {
            r.mesh
                .as_ref()
                .and_then(|m| m.error.as_ref())
                .map(|e| format!("rank {}: {e}", r.info.rank))
        })
        .collect();
    if !errors.is_empty() {
        return check("process group", Status::Fail, errors.join("; "));
    }
    if results.iter().any(|r| r.mesh.is_none()) {
        return check(
            "process group",
            Status::Skip,
            "not started: a peer is unreachable".into(),
        );
    }
    check(
        "process group",
        Status::Ok,
        format!(
            "init_process_group connected {} ranks; allreduce correct",
            results.len()
        ),
    )
}

fn shared_memory(results: &[RankResult], nnodes: usize) -> Check {
    let bad: Vec<String> = results
        .iter()
        .filter_map(|r| {
            r.info
                .shm
                .error
                .as_ref()
                .map(|e| format!("rank {}: {e}", r.info.rank))
        })
        .collect();
    let used = results
        .iter()
        .any(|r| r.mesh.as_ref().is_some_and(|m| m.shared_memory));
    let crowded = results.iter().any(|r| r.info.local_world_size > 1);
    let usage = if used {
        "the group uses shared memory".to_string()
    } else if nnodes > 1 {
        format!("not used: the ranks span {nnodes} nodes (shared memory is used when every rank is on one host)")
    } else if results.len() < 2 {
        "not used: 1 rank".into()
    } else if results.iter().any(|r| r.mesh.is_none()) {
        "the group was not started".into()
    } else {
        "not used by the group".into()
    };
    if !bad.is_empty() {
        // Without /dev/shm the ranks of one host talk over loopback TCP: slower, not broken.
        let status = if crowded { Status::Warn } else { Status::Ok };
        return check(
            "shared memory",
            status,
            format!("{}; {usage}", bad.join("; ")),
        );
    }
    let free = results
        .iter()
        .filter_map(|r| r.info.shm.free_bytes)
        .min()
        .map_or("?".into(), |b| {
            format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
        });
    check(
        "shared memory",
        Status::Ok,
        format!("/dev/shm segments work on every rank ({free} free at least); {usage}"),
    )
}

fn clock(ranks: &[RankRow], limits: &Limits) -> Check {
    let worst = ranks
        .iter()
        .filter(|r| r.info.rank != 0)
        .filter_map(|r| r.clock_offset_us.map(|o| (r.info.rank, o, r.clock_rtt_us)))
        .max_by(|x, y| x.1.abs().total_cmp(&y.1.abs()));
    let missing: Vec<String> = ranks
        .iter()
        .filter(|r| r.clock_offset_us.is_none())
        .map(|r| format!("rank {}", r.info.rank))
        .collect();
    let Some((rank, offset, rtt)) = worst else {
        let why = if ranks.len() < 2 {
            "no other rank to compare with".to_string()
        } else {
            format!("not measured (no link to rank 0): {}", missing.join(", "))
        };
        return check("clock", Status::Skip, why);
    };
    let sign = if offset >= 0.0 { "+" } else { "" };
    let detail = format!(
        "largest offset from rank 0: rank {rank}, {sign}{} (± {} RTT/2)",
        us_text(offset),
        us_text(rtt.unwrap_or(0.0) / 2.0)
    );
    if offset.abs() > limits.max_clock_skew_us {
        return check(
            "clock",
            Status::Fail,
            format!(
                "{detail}: beyond --max-clock-skew {}",
                us_text(limits.max_clock_skew_us)
            ),
        );
    }
    if !missing.is_empty() {
        return check(
            "clock",
            Status::Warn,
            format!("{detail}; not measured: {}", missing.join(", ")),
        );
    }
    check("clock", Status::Ok, detail)
}
