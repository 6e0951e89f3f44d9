//! One rank of `phalanx doctor`, started by the launcher like any worker:
//!
//! 1. probe: interface and address (`ifname::select_from`, as `init_process_group` does) and
//!    the variable that chose them, hostname,
//!    `/dev/shm`; listen on that address and publish it all under `doctor/rank/<rank>`;
//! 2. connect to every rank and accept every rank's connection ([`link::connect_all`]),
//!    publish the view under `doctor/reach/<rank>`;
//! 3. measure every link that works both ways, one pair per rank per round;
//! 4. when every link works, start the real process group and run one allreduce;
//! 5. publish `doctor/result/<rank>`; rank 0 builds the report and publishes `doctor/report`,
//!    which local rank 0 of every node hands to the `phalanx doctor` that launched it.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use phalanx_core::ReduceOp;
use phalanx_pg::InitOptions;
use phalanx_store::{HashStore, PrefixStore, Store, TcpStore};
use phalanx_transport::{ifname, shm};

use super::args::Args;
use super::data::{Half, IfnameFrom, Mesh, RankInfo, RankResult, Reach, ShmProbe};
use super::link::{self, BwLimits};
use super::report;

/// Runs this rank's part; rank 0 (or, with a report file, local rank 0 of every node) ends
/// with the report.
pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let o = InitOptions::from_env().context("reading the launcher's environment")?;
    let e = o.env.clone();
    let (rank, n) = (e.rank, e.world_size);
    let store = open_store(&o)?;
    let wait = o.timeout;

    let (info, listener) = probe(&o);
    publish(&*store, &format!("doctor/rank/{rank}"), &info)?;
    let infos: Vec<RankInfo> = gather(&*store, "doctor/rank", n, wait)?;
    let addrs: Vec<Option<SocketAddr>> = infos
        .iter()
        .map(|i| {
            let ip: IpAddr = i.ip.as_deref()?.parse().ok()?;
            Some(SocketAddr::new(ip, i.port?))
        })
        .collect();
    // One nonce for the job, so that a stray connection to a doctor port is told apart.
    let nonce = {
        let mine = format!("{:016x}", rand_u64());
        let v = store.compare_set("doctor/nonce", b"", mine.as_bytes())?;
        u64::from_str_radix(&String::from_utf8_lossy(&v), 16).unwrap_or(0)
    };

    let mut peers = link::connect_all(rank, &addrs, listener, nonce, args.connect_timeout);
    publish(&*store, &format!("doctor/reach/{rank}"), &peers.reach)?;
    let reach: Vec<Reach> = gather(&*store, "doctor/reach", n, wait)?;
    // A pair is measured when both ends agree its socket exists: the lower rank dialled and
    // the higher one accepted. Everyone reads the same views, so everyone agrees.
    let linked = |a: usize, b: usize| reach[a].out[b].is_none() && reach[b].inc[a];
    let all_linked =
        (0..n).all(|a| (0..n).all(|b| a == b || (reach[a].out[b].is_none() && reach[b].inc[a])));

    let bw = BwLimits {
        time: args.bandwidth_time,
        bytes: args.bandwidth_bytes,
    };
    let mut halves: Vec<Half> = Vec::new();
    for round in link::rounds(n) {
        let Some(&(a, b)) = round.iter().find(|(a, b)| *a == rank || *b == rank) else {
            continue;
        };
        let peer = if a == rank { b } else { a };
        if !linked(a, b) {
            continue;
        }
        match peers.conns[peer].as_mut() {
            Some(s) => halves.push(link::measure(rank, peer, s, bw)),
            None => halves.push(Half {
                peer,
                error: Some("no connection on this side".into()),
                ..Half::default()
            }),
        }
    }
    drop(peers);

    let mesh = all_linked.then(|| check_mesh(o.clone()));
    let result = RankResult {
        info,
        reach: reach[rank].clone(),
        halves,
        mesh,
    };
    publish(&*store, &format!("doctor/result/{rank}"), &result)?;

    let report_json = if rank == 0 {
        let results: Vec<RankResult> = gather(&*store, "doctor/result", n, wait)?;
        let report = report::build(&results, args.limits());
        let text = serde_json::to_string(&report)?;
        store.set("doctor/report", text.as_bytes())?;
        Some(text)
    } else if e.local_rank == 0 && args.report_file.is_some() {
        // Rank 0 may still be measuring its last pair: wait as long as any other step may.
        store.wait_timeout(&["doctor/report"], wait)?;
        Some(String::from_utf8(store.get("doctor/report")?)?)
    } else {
        None
    };
    match (report_json, &args.report_file) {
        (Some(json), Some(path)) => std::fs::write(path, json)
            .with_context(|| format!("writing the report to {}", path.display()))?,
        // Under another launcher (`phalanx launch -- phalanx doctor`): rank 0 prints, and
        // fails when a check did, so that the launcher's status says so too.
        (Some(json), None) if rank == 0 => {
            let report: super::data::Report = serde_json::from_str(&json)?;
            super::render::print(&report, args.json);
            if !report.ok {
                return Ok(ExitCode::FAILURE);
            }
        }
        _ => {}
    }
    Ok(ExitCode::SUCCESS)
}

fn open_store(o: &InitOptions) -> anyhow::Result<Arc<dyn Store>> {
    let e = &o.env;
    let client: Arc<dyn Store> = if e.world_size == 1 {
        Arc::new(HashStore::with_timeout(o.timeout))
    } else if o.agent_store {
        let addr = format!("{}:{}", e.master_addr, e.master_port);
        Arc::new(
            TcpStore::connect(&addr, &o.auth, o.timeout)
                .with_context(|| format!("rank {}: connecting to the store at {addr}", e.rank))?,
        )
    } else {
        bail!(
            "phalanx doctor needs the launcher's store: run `phalanx doctor <launch flags>` \
             (or `phalanx launch … -- phalanx doctor`), not under a launcher without one"
        );
    };
    Ok(if o.store_prefix.is_empty() {
        client
    } else {
        Arc::new(PrefixStore::new(
            o.store_prefix.trim_end_matches('/').to_string(),
            client,
        ))
    })
}

fn publish<T: serde::Serialize>(store: &dyn Store, key: &str, v: &T) -> anyhow::Result<()> {
    store
        .set(key, serde_json::to_string(v)?.as_bytes())
        .with_context(|| format!("publishing {key}"))
}

fn gather<T: serde::de::DeserializeOwned>(
    store: &dyn Store,
    prefix: &str,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<T>> {
    let keys: Vec<String> = (0..n).map(|r| format!("{prefix}/{r}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    store
        .wait_timeout(&refs, timeout)
        .with_context(|| format!("waiting for every rank's {prefix}"))?;
    store
        .multi_get(&refs)?
        .iter()
        .zip(&keys)
        .map(|(v, k)| serde_json::from_slice(v).with_context(|| format!("parsing {k}")))
        .collect()
}

/// Where this rank is and what it would use, plus its listener on that address.
fn probe(o: &InitOptions) -> (RankInfo, Option<TcpListener>) {
    let e = &o.env;
    let (sel, if_error) = match ifname::select_from(o.socket_ifname.as_ref(), &e.master_addr) {
        Ok(s) => (Some(s), None),
        Err(err) => (None, Some(err.to_string())),
    };
    let (listener, if_error) = match &sel {
        Some(s) => match TcpListener::bind((s.ip, 0)) {
            Ok(l) => (Some(l), if_error),
            Err(err) => (None, Some(format!("listen on {}: {err}", s.ip))),
        },
        None => (None, if_error),
    };
    let info = RankInfo {
        rank: e.rank,
        node_rank: e.group_rank,
        local_rank: e.local_rank,
        local_world_size: e.local_world_size,
        hostname: phalanx_core::host::hostname().unwrap_or_else(|| "?".into()),
        ifname: sel.as_ref().map(|s| s.ifname.clone()),
        ifname_from: o.socket_ifname.as_ref().map(|s| IfnameFrom {
            var: s.origin.var.to_string(),
            value: s.origin.value.clone(),
        }),
        ip: sel.as_ref().map(|s| s.ip.to_string()),
        port: listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.port()),
        if_error,
        shm: probe_shm(e.rank),
    };
    (info, listener)
}

/// Free space of `/dev/shm` and a segment of the size the process group maps per rank.
fn probe_shm(rank: usize) -> ShmProbe {
    let bytes = shm::ShmGroup::segment_bytes(shm::DEFAULT_BUFFER_BYTES);
    let name = format!(
        "phalanx-doctor-{}-{rank}-{:08x}",
        std::process::id(),
        rand_u64() as u32
    );
    // The segment is removed when dropped (its creator unlinks it).
    let error = shm::ShmSegment::create(&name, bytes)
        .err()
        .map(|e| e.to_string());
    ShmProbe {
        free_bytes: shm_free(),
        segment_bytes: bytes,
        error,
    }
}

fn shm_free() -> Option<u64> {
    let path = std::ffi::CString::new("/dev/shm").ok()?;
    // SAFETY: statvfs fills the zeroed struct we own; the path is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// The real thing: `init_process_group` with the launcher's settings and one allreduce.
fn check_mesh(o: InitOptions) -> Mesh {
    let rank = o.env.rank;
    let n = o.env.world_size;
    match phalanx_pg::init_with(o) {
        Err(e) => Mesh {
            error: Some(format!("init_process_group: {e}")),
            shared_memory: false,
        },
        Ok(pg) => {
            let mut v = vec![rank as f64 + 1.0; 1024];
            let want = (n * (n + 1) / 2) as f64;
            let error = match pg.allreduce(&mut v, ReduceOp::Sum) {
                Err(e) => Some(format!("allreduce: {e}")),
                Ok(()) if v.iter().any(|&x| x != want) => {
                    Some(format!("allreduce: got {} instead of {want}", v[0]))
                }
                Ok(()) => None,
            };
            Mesh {
                error,
                shared_memory: pg.uses_shared_memory(),
            }
        }
    }
}

/// Enough randomness to tell two doctor runs apart (not a secret): std's per-process random
/// hash keys over the clock and the pid.
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}
