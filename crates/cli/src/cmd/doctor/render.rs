//! The human-readable `phalanx doctor` report (`--json` prints the [`Report`] instead).

use std::fmt::Write;

use super::data::Report;

/// The report as text: ranks, links, checks, and the verdict last.
pub(crate) fn text(r: &Report) -> String {
    let mut s = String::new();
    let nodes = if r.nnodes == 1 { "node" } else { "nodes" };
    let _ = writeln!(
        s,
        "phalanx doctor: {} ranks on {} {nodes}",
        r.world_size, r.nnodes
    );
    let _ = writeln!(s, "\nranks");
    let _ = writeln!(
        s,
        "  {:>4} {:>4} {:>5}  {:<16} {:<10} {:<22} {:<26} {:>12}",
        "rank", "node", "local", "host", "interface", "address", "shm (/dev/shm)", "clock-rank0"
    );
    for row in &r.ranks {
        let i = &row.info;
        let addr = match (&i.ip, i.port) {
            (Some(ip), Some(p)) => format!("{ip}:{p}"),
            (Some(ip), None) => ip.clone(),
            _ => "-".into(),
        };
        let free = i.shm.free_bytes.map_or("?".into(), |b| {
            format!("{:.1} GiB free", b as f64 / (1u64 << 30) as f64)
        });
        let shm = match (&i.shm.error, row.uses_shared_memory) {
            (Some(_), _) => format!("FAIL, {free}"),
            (None, Some(true)) => format!("in use, {free}"),
            (None, _) => format!("ok, {free}"),
        };
        let clock = row.clock_offset_us.map_or("-".into(), |o| {
            format!("{}{}", if o > 0.0 { "+" } else { "" }, us_text(o))
        });
        let _ = writeln!(
            s,
            "  {:>4} {:>4} {:>5}  {:<16} {:<10} {:<22} {:<26} {:>12}",
            i.rank,
            i.node_rank,
            i.local_rank,
            i.hostname,
            i.ifname.as_deref().unwrap_or("-"),
            addr,
            shm,
            clock
        );
    }
    if !r.links.is_empty() {
        let _ = writeln!(
            s,
            "\nlinks (RTT: median of 50 pings; bandwidth: one way, {:.0} ms or {} MiB per direction)",
            r.limits.bandwidth_ms,
            r.limits.bandwidth_bytes >> 20
        );
        let _ = writeln!(
            s,
            "  {:<12} {:>10} {:>14} {:>14}  status",
            "a ↔ b", "RTT", "a→b", "b→a"
        );
        for l in &r.links {
            let g = |x: Option<f64>| x.map_or("-".into(), gbps_text);
            let status = if !l.errors.is_empty() {
                format!("FAIL: {}", l.errors.join("; "))
            } else if r.slowest_link == Some([l.a, l.b]) {
                "ok (slowest)".into()
            } else if l.same_node {
                "ok (same node)".into()
            } else {
                "ok".into()
            };
            let _ = writeln!(
                s,
                "  {:<12} {:>10} {:>14} {:>14}  {status}",
                format!("{} ↔ {}", l.a, l.b),
                l.rtt.map_or("-".into(), |t| us_text(t.median_us)),
                g(l.a_to_b_gbps),
                g(l.b_to_a_gbps),
            );
        }
    }
    let _ = writeln!(s, "\nchecks");
    for c in &r.checks {
        let _ = writeln!(s, "  {:<5} {:<14} {}", c.status.name(), c.name, c.detail);
    }
    let _ = writeln!(s, "\n{}", r.verdict);
    let _ = writeln!(s, "verdict: {}", if r.ok { "ok" } else { "FAILED" });
    s
}

/// Prints the report (text or one JSON object) on stdout.
pub(crate) fn print(report: &Report, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).expect("a report serialises")
        );
    } else {
        print!("{}", text(report));
    }
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
