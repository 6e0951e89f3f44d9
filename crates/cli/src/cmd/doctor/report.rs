//! Rank 0's side of `phalanx doctor`: every rank's [`RankResult`] in, the [`Report`] out
//! (links merged from both ends, checks, the slowest link, the verdict). Pure.

use super::checks::{bandwidth, clock, interfaces, mesh, reachability, shared_memory};
use super::data::{Limits, LinkRow, RankInfo, RankResult, RankRow, Report, Status};
use super::render::{gbps_text, us_text};

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

#[cfg(test)]
mod tests;
