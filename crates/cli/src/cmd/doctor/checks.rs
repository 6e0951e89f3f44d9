//! The checks of `phalanx doctor`'s report, one function each: what passes, what only
//! warns, and what fails the run (with the ranks and addresses involved).

use super::data::{Check, IfnameFrom, Limits, LinkRow, RankResult, RankRow, Status};
use super::render::{gbps_text, us_text};

fn check(name: &str, status: Status, detail: String) -> Check {
    Check {
        name: name.into(),
        status,
        detail,
    }
}

pub(crate) fn interfaces(results: &[RankResult], nnodes: usize) -> Check {
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
    let lo: Vec<&RankResult> = results
        .iter()
        .filter(|r| {
            nnodes > 1
                && r.info
                    .ip
                    .as_deref()
                    .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
                    .is_some_and(|ip| ip.is_loopback())
        })
        .collect();
    if !lo.is_empty() {
        let ranks: Vec<String> = lo
            .iter()
            .map(|r| {
                format!(
                    "rank {} ({} {}) {}",
                    r.info.rank,
                    r.info.ifname.as_deref().unwrap_or("?"),
                    r.info.ip.as_deref().unwrap_or("?"),
                    IfnameFrom::describe(r.info.ifname_from.as_ref())
                )
            })
            .collect();
        // Point at what to change: the variable that chose loopback, else the route.
        let mut vars: Vec<&str> = lo
            .iter()
            .filter_map(|r| r.info.ifname_from.as_ref().map(|f| f.var.as_str()))
            .collect();
        vars.sort_unstable();
        vars.dedup();
        let fix = if vars.is_empty() {
            "set PHALANX_SOCKET_IFNAME, or check the route to MASTER_ADDR".to_string()
        } else {
            format!(
                "{} names an interface the other hosts cannot reach",
                vars.join(", ")
            )
        };
        return check(
            "interfaces",
            Status::Fail,
            format!(
                "loopback address in a {nnodes}-node job, other hosts cannot reach it: {} ({fix})",
                ranks.join(", ")
            ),
        );
    }
    // Each interface with what chose it: `eth1 from NCCL_SOCKET_IFNAME=eth1`.
    let mut chosen: Vec<(&str, Option<&IfnameFrom>)> = results
        .iter()
        .filter_map(|r| Some((r.info.ifname.as_deref()?, r.info.ifname_from.as_ref())))
        .collect();
    chosen.sort_unstable();
    chosen.dedup();
    let chosen: Vec<String> = chosen
        .into_iter()
        .map(|(name, from)| format!("{name} {}", IfnameFrom::describe(from)))
        .collect();
    check(
        "interfaces",
        Status::Ok,
        format!(
            "every rank has an address (interfaces: {})",
            chosen.join("; ")
        ),
    )
}

pub(crate) fn reachability(links: &[LinkRow]) -> Check {
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

pub(crate) fn bandwidth(links: &[LinkRow], limits: &Limits) -> Check {
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

pub(crate) fn mesh(results: &[RankResult]) -> Check {
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

pub(crate) fn shared_memory(results: &[RankResult], nnodes: usize) -> Check {
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

pub(crate) fn clock(ranks: &[RankRow], limits: &Limits) -> Check {
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
