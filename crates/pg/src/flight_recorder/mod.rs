//! The flight recorder: the last N collectives of every process group of this process, written
//! on a failure in the format PyTorch's analyser (`python -m
//! torch.distributed.flight_recorder.fr_trace`, `torchfrtrace`) and `phalanx fr-trace` read.
//!
//! Note [Flight recorder]: every collective and point-to-point operation that runs (through
//! `Shared::run_in`, so phalanx's own programs and the PyTorch backend alike) takes one slot
//! of a ring of `TORCH_FR_BUFFER_SIZE` entries (default 2000, 0 turns recording off, as in
//! PyTorch): its group, sequence number, operation, element counts and dtype, and the times it
//! started and completed. An entry is a fixed-size `Copy` value written into a slot allocated
//! once, under one process-wide mutex taken once per operation, when it finishes: completed,
//! or failed (then it stays `started`, and the dump follows). The times are CPU time-stamp
//! counter reads, turned into nanoseconds only when a dump is written. So a call costs one
//! uncontended lock and two counter reads, ~30 ns (docs/flight-recorder.md has the
//! measurement). The operation that hangs is the one that fails and is recorded before the
//! dump; another group's operation still running in another thread is not in that dump, and
//! is in the one its own failure writes (each failure rewrites the file).
//!
//! When a collective fails (a timeout, a fingerprint mismatch, a peer's failure: the error path
//! of `run_in`, after the peers were told), the rank writes every group's entries to
//! `<prefix><rank>` if a prefix is set (`PHALANX_FR_DUMP_TEMP_FILE`, `TORCH_FR_DUMP_TEMP_FILE`
//! or `TORCH_NCCL_DEBUG_INFO_TEMP_FILE`) or `TORCH_NCCL_DUMP_ON_TIMEOUT=1` asks for PyTorch's
//! default `/tmp/nccl_trace_rank_`. Unlike PyTorch, nothing is written by default: phalanx's
//! tests fail on purpose by the hundred. The file is a pickled dict with PyTorch 2.15's keys
//! (`version` "2.10", `pg_config`, `pg_status`, `entries`; each entry with every key its
//! analyser reads), written to a temporary name and renamed, so a reader never sees half a
//! dump. A dump that cannot be written is one line on stderr naming the path and the OS error;
//! the job's own error is unchanged.
//!
//! ```no_run
//! // Every rank of a job started with TORCH_FR_DUMP_TEMP_FILE=/tmp/fr/trace_ writes
//! // /tmp/fr/trace_<rank> when a collective fails; then, without PyTorch:
//! //   phalanx fr-trace /tmp/fr/trace_
//! let dump = std::fs::read("/tmp/fr/trace_0").unwrap();
//! let v = phalanx_pg::flight_recorder::pickle::decode(&dump).unwrap();
//! assert_eq!(v.get("version").and_then(|v| v.as_str()), Some("2.10"));
//! ```

pub mod pickle;

use std::{
    path::PathBuf,
    sync::{Mutex, OnceLock},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use phalanx_core::{env, DType};

use pickle::Value;

/// The dump format's version: what PyTorch 2.15's recorder writes (its analyser picks the
/// coalesced-group matching of 2.7 and later from it).
pub const VERSION: &str = "2.10";

/// Entries kept per process when no variable says otherwise (PyTorch's default).
pub const DEFAULT_BUFFER_SIZE: usize = 2000;

/// PyTorch's default dump prefix, used when `TORCH_NCCL_DUMP_ON_TIMEOUT=1` names none.
pub const DEFAULT_DUMP_PREFIX: &str = "/tmp/nccl_trace_rank_";

/// What one collective moves: element type and counts, and the peer of a point-to-point one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) dtype: DType,
    /// Elements of the input buffer (the whole buffer for the `_v` collectives, whose
    /// per-rank shares differ while the whole is the same everywhere).
    pub(crate) input: usize,
    /// Elements of the output buffer.
    pub(crate) output: usize,
    /// The other rank of a send or receive, in the group's numbering.
    pub(crate) peer: Option<usize>,
}

impl Shape {
    /// `input` elements in, `output` out, of `T`.
    pub(crate) fn of<T: phalanx_core::Element>(input: usize, output: usize) -> Shape {
        Shape {
            dtype: T::DTYPE,
            input,
            output,
            peer: None,
        }
    }

    /// A barrier: no data (PyTorch records it as one element).
    pub(crate) fn none() -> Shape {
        Shape {
            dtype: DType::U8,
            input: 0,
            output: 0,
            peer: None,
        }
    }

    /// `n` elements of `T` to or from `peer`.
    pub(crate) fn p2p<T: phalanx_core::Element>(n: usize, peer: usize) -> Shape {
        Shape {
            peer: Some(peer),
            ..Shape::of::<T>(n, n)
        }
    }

    /// The larger buffer's bytes (what traces and the algorithm choice are told).
    pub(crate) fn bytes(&self) -> usize {
        self.input.max(self.output) * self.dtype.size()
    }
}

/// Where an entry stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Started,
    Completed,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    record_id: u64,
    pg: u32,
    collective_seq: u64,
    p2p_seq: u64,
    is_p2p: bool,
    op: &'static str,
    shape: Shape,
    /// [`ticks`] when it started and completed (0: not completed).
    created: u64,
    completed: u64,
    state: State,
}

#[derive(Debug)]
struct Group {
    /// PyTorch's group name: the order groups were made in this process (`"0"` is the world).
    name: String,
    ranks: Vec<usize>,
    rank: usize,
    timeout_ms: u64,
    next_p2p: u64,
    last_started: Option<u64>,
    last_completed: Option<u64>,
}

#[derive(Debug)]
struct Ring {
    entries: Vec<Entry>,
    next_id: u64,
    groups: Vec<Group>,
    /// The clock when the recorder started ([`Clock`]).
    epoch: Clock,
}

/// The process's recorder: `None` when `TORCH_FR_BUFFER_SIZE=0`.
#[derive(Debug)]
struct Recorder {
    capacity: usize,
    ring: Mutex<Ring>,
    /// The dump's path prefix, when failures are dumped.
    prefix: Option<String>,
}

/// The recorder's settings as the environment gives them, with a warning per bad value.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) capacity: usize,
    pub(crate) prefix: Option<String>,
    pub(crate) warnings: Vec<String>,
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
pub(crate) fn settings(lookup: &dyn Fn(&str) -> Option<String>) -> Settings {
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

fn recorder() -> Option<&'static Recorder> {
    static RECORDER: OnceLock<Option<Recorder>> = OnceLock::new();
    RECORDER
        .get_or_init(|| {
            let s = settings(&|name| std::env::var(name).ok());
            for w in &s.warnings {
                eprintln!("phalanx: warning: flight recorder: {w}");
            }
            (s.capacity > 0).then(|| Recorder {
                capacity: s.capacity,
                ring: Mutex::new(Ring {
                    entries: Vec::with_capacity(s.capacity),
                    next_id: 0,
                    groups: Vec::new(),
                    epoch: Clock::now(),
                }),
                prefix: s.prefix,
            })
        })
        .as_ref()
}

/// A timestamp in the cheapest clock there is: the CPU's time-stamp counter on x86-64 (~12 ns
/// here, where reading the system clock costs ~57 ns in a VM), converted to nanoseconds only
/// when a dump is written ([`Clock`]); elsewhere the system clock's nanoseconds.
#[inline]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions; every x86-64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        wall_ns()
    }
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// How [`ticks`] map to the wall clock: one pair read when the recorder starts, one when a dump
/// is written, and the line through them (the counter is invariant on CPUs that run phalanx's
/// shared-memory collectives; a dump's times are as good as that).
#[derive(Debug, Clone, Copy)]
struct Clock {
    ticks: u64,
    ns: u64,
}

impl Clock {
    fn now() -> Clock {
        Clock {
            ticks: ticks(),
            ns: wall_ns(),
        }
    }

    /// Wall-clock nanoseconds of `t` ticks, on the line from `self` to `later`.
    fn ns(&self, later: &Clock, t: u64) -> u64 {
        let dt = later.ticks.saturating_sub(self.ticks);
        let dns = later.ns.saturating_sub(self.ns);
        if dt == 0 || cfg!(not(target_arch = "x86_64")) {
            return t;
        }
        let per_tick = dns as f64 / dt as f64;
        (self.ns as f64 + (t as f64 - self.ticks as f64) * per_tick) as u64
    }
}

/// A group's handle in the recorder.
pub(crate) type GroupId = u32;

/// An operation that started running: when (in [`ticks`]); nothing is locked or written yet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started(u64);

/// Registers a group of `world_size` ranks in which this process is `rank`; its ranks are
/// `0..world_size` until [`set_ranks`] maps them to the job's.
pub(crate) fn register(rank: usize, world_size: usize, timeout: Duration) -> GroupId {
    let Some(r) = recorder() else { return 0 };
    let mut ring = r.ring.lock().unwrap();
    let id = ring.groups.len() as GroupId;
    ring.groups.push(Group {
        name: id.to_string(),
        ranks: (0..world_size).collect(),
        rank,
        timeout_ms: timeout.as_millis() as u64,
        next_p2p: 0,
        last_started: None,
        last_completed: None,
    });
    id
}

/// Group `pg`'s ranks in the job's numbering.
pub(crate) fn set_ranks(pg: GroupId, ranks: &[usize]) {
    let Some(r) = recorder() else { return };
    if let Some(g) = r.ring.lock().unwrap().groups.get_mut(pg as usize) {
        g.ranks = ranks.to_vec();
    }
}

/// Notes the time an operation starts to run (Note [Flight recorder]).
#[inline]
pub(crate) fn start() -> Started {
    Started(if recorder().is_some() { ticks() } else { 0 })
}

/// What finished: operation `op` of group `pg`, a collective numbered `seq`, or a
/// point-to-point operation (`seq` is then the group's next collective, as in PyTorch).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Op {
    pub(crate) pg: GroupId,
    pub(crate) seq: u64,
    pub(crate) is_p2p: bool,
    pub(crate) name: &'static str,
    pub(crate) shape: Shape,
}

/// Records `op`, which started at `started`, as completed or (`completed == false`: it failed,
/// and a dump follows) as started and never completed. The one lock of an operation.
#[inline]
pub(crate) fn finish(started: Started, op: Op, completed: bool) {
    let Some(r) = recorder() else { return };
    let done = if completed { ticks() } else { 0 };
    let mut ring = r.ring.lock().unwrap();
    let Some(g) = ring.groups.get_mut(op.pg as usize) else {
        return;
    };
    let p2p_seq = if op.is_p2p {
        g.next_p2p += 1;
        g.next_p2p - 1
    } else {
        g.last_started = Some(op.seq);
        if completed {
            g.last_completed = Some(op.seq);
        }
        0
    };
    let record_id = ring.next_id;
    ring.next_id += 1;
    let e = Entry {
        record_id,
        pg: op.pg,
        collective_seq: op.seq,
        p2p_seq,
        is_p2p: op.is_p2p,
        op: op.name,
        shape: op.shape,
        created: started.0,
        completed: done,
        state: if completed {
            State::Completed
        } else {
            State::Started
        },
    };
    if ring.entries.len() < r.capacity {
        ring.entries.push(e);
    } else {
        let slot = (record_id % r.capacity as u64) as usize;
        ring.entries[slot] = e;
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
fn job_rank(ring: &Ring) -> usize {
    std::env::var("RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .or_else(|| ring.groups.first().map(|g| g.ranks[g.rank]))
        .unwrap_or(0)
}

/// Writes the dump after a failure, if dumps are on (Note [Flight recorder]); returns where.
/// A dump that cannot be written is reported on stderr, never an error of the job.
pub(crate) fn dump_on_failure() -> Option<PathBuf> {
    let r = recorder()?;
    let prefix = r.prefix.as_deref()?;
    let (bytes, rank) = {
        let ring = r.ring.lock().unwrap();
        (pickle::encode(&dump_value(&ring)), job_rank(&ring))
    };
    let path = PathBuf::from(format!("{prefix}{rank}"));
    // Crash-safe (Note [Crash-safe write] in phalanx_core::file): a reader sees the whole dump or
    // none, and the hidden temporary name does not look like a rank's file.
    match phalanx_core::file::write_atomic(&path, &bytes) {
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
    use super::*;

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
    fn ticks_map_onto_the_wall_clock_line() {
        let epoch = Clock {
            ticks: 100,
            ns: 1_000,
        };
        let later = Clock {
            ticks: 300,
            ns: 1_400,
        };
        if cfg!(target_arch = "x86_64") {
            assert_eq!(epoch.ns(&later, 200), 1_200);
            assert_eq!(epoch.ns(&later, 300), 1_400);
        } else {
            assert_eq!(epoch.ns(&later, 1_234), 1_234);
        }
        let (a, b) = (Clock::now(), Clock::now());
        assert!(b.ticks >= a.ticks && b.ns >= a.ns);
    }

    #[test]
    fn a_dump_has_every_key_pytorch_reads_and_reads_back() {
        let mut ring = Ring {
            epoch: Clock::now(),
            entries: Vec::new(),
            next_id: 0,
            groups: vec![Group {
                name: "0".into(),
                ranks: vec![0, 1, 2],
                rank: 1,
                timeout_ms: 5000,
                next_p2p: 0,
                last_started: Some(0),
                last_completed: None,
            }],
        };
        ring.entries.push(Entry {
            record_id: 0,
            pg: 0,
            collective_seq: 0,
            p2p_seq: 0,
            is_p2p: false,
            op: "allreduce",
            shape: Shape::of::<f32>(16, 16),
            created: 1,
            completed: 0,
            state: State::Started,
        });
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
