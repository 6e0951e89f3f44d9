//! The flight recorder's dump: its settings from the environment, the dump as PyTorch's dict
//! (pickled by `pickle.rs`), and the file written on a failure (Note [Flight recorder]).

use std::path::PathBuf;

use phalanx_core::{env, DType};

use super::{
    clock::Clock,
    pickle::{self, Value},
    ring::{Entry, Group, Ring, State},
};

/// The dump format's version: what PyTorch 2.15's recorder writes (its analyser picks the
/// coalesced-group matching of 2.7 and later from it).
pub const VERSION: &str = "2.10";

/// Entries kept per process when no variable says otherwise (PyTorch's default).
pub const DEFAULT_BUFFER_SIZE: usize = 2000;

/// PyTorch's default dump prefix, used when `TORCH_NCCL_DUMP_ON_TIMEOUT=1` names none.
pub const DEFAULT_DUMP_PREFIX: &str = "/tmp/nccl_trace_rank_";

/// The recorder's settings as the environment gives them, with a warning per bad value.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Settings {
    /// Entries kept ([`DEFAULT_BUFFER_SIZE`]; 0: recording is off).
    pub(super) capacity: usize,
    /// The dump's path prefix, when failures are dumped.
    pub(super) prefix: Option<String>,
    /// One line per bad value.
    pub(super) warnings: Vec<String>,
}

/// The first of `vars` set (non-empty) in `lookup`, with its name.
fn first(
    vars: &[env::EnvVar],
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Option<(&'static str, String)> {
    vars.iter().find_map(|v| {
        lookup(v.name)
            .filter(|x| !x.is_empty())
            .map(|x| (v.name, x))
    })
}

/// Reads the recorder's variables (Note [Flight recorder]) through `lookup`.
pub(super) fn settings(lookup: &dyn Fn(&str) -> Option<String>) -> Settings {
    let mut warnings = Vec::new();
    let size_vars = [
        env::PHALANX_FR_BUFFER_SIZE,
        env::TORCH_FR_BUFFER_SIZE,
        env::TORCH_NCCL_TRACE_BUFFER_SIZE,
    ];
    let capacity = match first(&size_vars, lookup) {
        None => DEFAULT_BUFFER_SIZE,
        Some((name, v)) => match v.trim().parse::<usize>() {
            Ok(n) => n,
            Err(_) => {
                warnings.push(format!(
                    "{name}={v:?} is not a number of entries (0 turns the flight recorder \
                     off); keeping the last {DEFAULT_BUFFER_SIZE} collectives"
                ));
                DEFAULT_BUFFER_SIZE
            }
        },
    };
    let prefix_vars = [
        env::PHALANX_FR_DUMP_TEMP_FILE,
        env::TORCH_FR_DUMP_TEMP_FILE,
        env::TORCH_NCCL_DEBUG_INFO_TEMP_FILE,
    ];
    let named = first(&prefix_vars, lookup).map(|(_, p)| p);
    let on_vars = [
        env::PHALANX_FR_DUMP_ON_TIMEOUT,
        env::TORCH_NCCL_DUMP_ON_TIMEOUT,
    ];
    let dump = match first(&on_vars, lookup) {
        None => named.is_some(),
        Some((name, v)) => match v.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => true,
            "0" | "false" | "no" | "off" => false,
            _ => {
                warnings.push(format!(
                    "{name}={v:?} is neither 1 nor 0; dumping on failure only where a dump \
                     prefix is set"
                ));
                named.is_some()
            }
        },
    };
    let prefix = dump.then(|| named.unwrap_or_else(|| DEFAULT_DUMP_PREFIX.to_string()));
    Settings {
        capacity,
        prefix: prefix.filter(|_| capacity > 0),
        warnings,
    }
}

/// PyTorch's name of phalanx's operation `op` (`allreduce` is `all_reduce`).
fn torch_op(op: &str) -> &str {
    match op {
        "allreduce" => "all_reduce",
        "allgather" => "all_gather",
        "allgather_v" => "all_gather_v",
        "isend" => "send",
        "irecv" => "recv",
        "batch_isend_irecv" => "coalesced",
        other => other,
    }
}

/// PyTorch's name of a dtype (`c10::ScalarType`'s).
fn torch_dtype(d: DType) -> &'static str {
    match d {
        DType::F32 => "Float",
        DType::F64 => "Double",
        DType::BF16 => "BFloat16",
        DType::F16 => "Half",
        DType::I32 => "Int",
        DType::I64 => "Long",
        DType::U8 => "Byte",
    }
}

fn int(i: u64) -> Value {
    Value::Int(i as i64)
}

fn s(text: &str) -> Value {
    Value::from(text)
}

fn entry_value(e: &Entry, g: &Group, ns: &dyn Fn(u64) -> u64) -> Value {
    let op = torch_op(e.op);
    let profiling_name = match (op, e.shape.peer) {
        ("send", Some(p)) => format!("phalanx:send {}->{p}", g.rank),
        ("recv", Some(p)) => format!("phalanx:recv {}<-{p}", g.rank),
        _ => format!("phalanx:{op}"),
    };
    // A barrier moves nothing; PyTorch records its one-element tensor, and its analyser
    // indexes the first size, so one empty tensor stands in for it.
    let sizes = |n: usize| Value::List(vec![Value::List(vec![int(n as u64)])]);
    let dtypes = Value::List(vec![s(torch_dtype(e.shape.dtype))]);
    let done = e.state == State::Completed;
    let (created_ns, completed_ns) = (ns(e.created), ns(e.completed));
    let started_ns = int(created_ns);
    Value::Dict(vec![
        (s("record_id"), int(e.record_id)),
        (s("pg_id"), int(e.pg.into())),
        (
            s("process_group"),
            Value::Tuple(vec![s(&g.name), s(group_desc(g))]),
        ),
        (s("collective_seq_id"), int(e.collective_seq)),
        (s("p2p_seq_id"), int(e.p2p_seq)),
        (
            s("op_id"),
            int(if e.is_p2p {
                e.p2p_seq
            } else {
                e.collective_seq
            }),
        ),
        (s("profiling_name"), Value::Str(profiling_name)),
        (s("time_created_ns"), int(created_ns)),
        (s("input_sizes"), sizes(e.shape.input)),
        (s("input_dtypes"), dtypes.clone()),
        (s("output_sizes"), sizes(e.shape.output)),
        (s("output_dtypes"), dtypes),
        (s("state"), s(if done { "completed" } else { "started" })),
        (s("time_discovered_started_ns"), started_ns),
        (
            s("time_discovered_completed_ns"),
            if done { int(completed_ns) } else { Value::None },
        ),
        (s("retired"), Value::Bool(done)),
        (s("timeout_ms"), int(g.timeout_ms)),
        (s("is_p2p"), Value::Bool(e.is_p2p)),
        (
            s("duration_ms"),
            if done {
                Value::Float(completed_ns.saturating_sub(created_ns) as f64 / 1e6)
            } else {
                Value::None
            },
        ),
        (s("frames"), Value::List(Vec::new())),
    ])
}

fn group_desc(g: &Group) -> &'static str {
    if g.name == "0" {
        "default_pg"
    } else {
        "undefined"
    }
}

fn ranks_text(ranks: &[usize]) -> String {
    let r: Vec<String> = ranks.iter().map(usize::to_string).collect();
    format!("[{}]", r.join(", "))
}

/// The dump of `ring`: PyTorch's dict, pickled.
pub(super) fn encode(ring: &Ring) -> Vec<u8> {
    pickle::encode(&dump_value(ring))
}

/// The whole recorder as PyTorch's dump dict.
fn dump_value(ring: &Ring) -> Value {
    let now = Clock::now();
    let ns = |t: u64| ring.epoch.ns(&now, t);
    let mut entries: Vec<&Entry> = ring.entries.iter().collect();
    entries.sort_by_key(|e| e.record_id);
    let entries = entries
        .into_iter()
        .filter_map(|e| Some(entry_value(e, ring.groups.get(e.pg as usize)?, &ns)))
        .collect();
    let pg_config = ring
        .groups
        .iter()
        .map(|g| {
            let v = Value::Dict(vec![
                (s("name"), s(&g.name)),
                (s("desc"), s(group_desc(g))),
                (s("ranks"), Value::Str(ranks_text(&g.ranks))),
            ]);
            (s(&g.name), v)
        })
        .collect();
    let seq = |x: Option<u64>| x.map_or(Value::Int(-1), int);
    let pg_status = ring
        .groups
        .iter()
        .map(|g| {
            let v = Value::Dict(vec![
                (s("last_enqueued_collective"), seq(g.last_started)),
                (s("last_started_collective"), seq(g.last_started)),
                (s("last_completed_collective"), seq(g.last_completed)),
            ]);
            (s(&g.name), v)
        })
        .collect();
    Value::Dict(vec![
        (s("version"), s(VERSION)),
        (
            s("comm_lib_version"),
            Value::Str(format!("phalanx {}", env!("CARGO_PKG_VERSION"))),
        ),
        (s("pg_config"), Value::Dict(pg_config)),
        (s("pg_status"), Value::Dict(pg_status)),
        (s("entries"), Value::List(entries)),
    ])
}

/// This process's rank in the job, for the dump's file name: `RANK` as launchers set it,
/// else its rank in the first group it made.
pub(super) fn job_rank(ring: &Ring) -> usize {
    std::env::var("RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .or_else(|| ring.groups.first().map(|g| g.ranks[g.rank]))
        .unwrap_or(0)
}

/// Writes `bytes`, a dump, to `<prefix><rank>`; returns where. A dump that cannot be written
/// is reported on stderr, never an error of the job.
pub(super) fn write(prefix: &str, rank: usize, bytes: &[u8]) -> Option<PathBuf> {
    let path = PathBuf::from(format!("{prefix}{rank}"));
    // Crash-safe (Note [Crash-safe write] in phalanx_core::file): a reader sees the whole dump or
    // none, and the hidden temporary name does not look like a rank's file.
    match phalanx_core::file::write_atomic(&path, bytes) {
        Ok(()) => {
            tracing::warn!(rank, path = %path.display(), "phalanx: flight recorder dump written");
            Some(path)
        }
        Err(e) => {
            eprintln!(
                "phalanx: warning: flight recorder: cannot write the dump {}: {e} (the job's \
                 own error follows unchanged)",
                path.display()
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::flight_recorder::ring::{Op, Shape, Started};

    fn with(vars: &[(&str, &str)]) -> Settings {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        settings(&move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn settings_follow_pytorch_and_name_bad_values() {
        let d = with(&[]);
        assert_eq!((d.capacity, d.prefix, d.warnings.len()), (2000, None, 0));
        let p = with(&[("TORCH_FR_DUMP_TEMP_FILE", "/x/t_")]);
        assert_eq!(p.prefix.as_deref(), Some("/x/t_"));
        let p = with(&[
            ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/y/t_"),
            ("TORCH_NCCL_DUMP_ON_TIMEOUT", "0"),
        ]);
        assert_eq!(p.prefix, None);
        let p = with(&[("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")]);
        assert_eq!(p.prefix.as_deref(), Some(DEFAULT_DUMP_PREFIX));
        // phalanx's spelling wins over PyTorch's.
        let p = with(&[
            ("PHALANX_FR_BUFFER_SIZE", "5"),
            ("TORCH_FR_BUFFER_SIZE", "7"),
        ]);
        assert_eq!(p.capacity, 5);
        let off = with(&[
            ("TORCH_FR_BUFFER_SIZE", "0"),
            ("TORCH_FR_DUMP_TEMP_FILE", "/x/"),
        ]);
        assert_eq!((off.capacity, off.prefix), (0, None));
        let bad = with(&[
            ("TORCH_FR_BUFFER_SIZE", "lots"),
            ("TORCH_NCCL_DUMP_ON_TIMEOUT", "maybe"),
        ]);
        assert_eq!((bad.capacity, bad.prefix), (2000, None));
        assert!(bad.warnings[0].starts_with("TORCH_FR_BUFFER_SIZE=\"lots\" is not a number"));
        assert!(bad.warnings[1].starts_with("TORCH_NCCL_DUMP_ON_TIMEOUT=\"maybe\""));
    }

    #[test]
    fn a_dump_has_every_key_pytorch_reads_and_reads_back() {
        let mut ring = Ring::new(1);
        let pg = ring.register(1, 3, Duration::from_secs(5));
        let op = Op {
            pg,
            seq: 0,
            is_p2p: false,
            name: "allreduce",
            shape: Shape::of::<f32>(16, 16),
        };
        ring.record(Started(1), op, false, 0);
        let v = pickle::decode(&pickle::encode(&dump_value(&ring))).unwrap();
        assert_eq!(v.get("version").unwrap().as_str(), Some("2.10"));
        let cfg = v.get("pg_config").unwrap().get("0").unwrap();
        assert_eq!(cfg.get("ranks").unwrap().as_str(), Some("[0, 1, 2]"));
        let e = &v.get("entries").unwrap().as_seq().unwrap()[0];
        for key in [
            "record_id",
            "pg_id",
            "process_group",
            "collective_seq_id",
            "p2p_seq_id",
            "op_id",
            "profiling_name",
            "time_created_ns",
            "input_sizes",
            "input_dtypes",
            "output_sizes",
            "output_dtypes",
            "state",
            "time_discovered_started_ns",
            "time_discovered_completed_ns",
            "retired",
            "timeout_ms",
            "is_p2p",
            "frames",
        ] {
            assert!(e.get(key).is_some(), "no {key}");
        }
        assert_eq!(
            e.get("profiling_name").unwrap().as_str(),
            Some("phalanx:all_reduce")
        );
        assert_eq!(e.get("input_sizes").unwrap().repr(), "[[16]]");
        assert_eq!(e.get("state").unwrap().as_str(), Some("started"));
    }
}
