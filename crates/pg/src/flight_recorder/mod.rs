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

mod clock;
mod dump;
pub mod pickle;
mod ring;

use std::{
    path::PathBuf,
    sync::{Mutex, OnceLock},
    time::Duration,
};

use clock::ticks;
pub use dump::{DEFAULT_BUFFER_SIZE, DEFAULT_DUMP_PREFIX, VERSION};
use ring::Ring;
pub(crate) use ring::{GroupId, Op, Shape, Started};

/// The process's recorder: `None` when `TORCH_FR_BUFFER_SIZE=0`.
#[derive(Debug)]
struct Recorder {
    ring: Mutex<Ring>,
    /// The dump's path prefix, when failures are dumped.
    prefix: Option<String>,
}

fn recorder() -> Option<&'static Recorder> {
    static RECORDER: OnceLock<Option<Recorder>> = OnceLock::new();
    RECORDER
        .get_or_init(|| {
            let s = dump::settings(&|name| std::env::var(name).ok());
            for w in &s.warnings {
                eprintln!("phalanx: warning: flight recorder: {w}");
            }
            (s.capacity > 0).then(|| Recorder {
                ring: Mutex::new(Ring::new(s.capacity)),
                prefix: s.prefix,
            })
        })
        .as_ref()
}

/// Registers a group of `world_size` ranks in which this process is `rank`; its ranks are
/// `0..world_size` until [`set_ranks`] maps them to the job's.
pub(crate) fn register(rank: usize, world_size: usize, timeout: Duration) -> GroupId {
    let Some(r) = recorder() else { return 0 };
    r.ring.lock().unwrap().register(rank, world_size, timeout)
}

/// Group `pg`'s ranks in the job's numbering.
pub(crate) fn set_ranks(pg: GroupId, ranks: &[usize]) {
    let Some(r) = recorder() else { return };
    r.ring.lock().unwrap().set_ranks(pg, ranks);
}

/// Notes the time an operation starts to run (Note [Flight recorder]).
#[inline]
pub(crate) fn start() -> Started {
    Started(if recorder().is_some() { ticks() } else { 0 })
}

/// Records `op`, which started at `started`, as completed or (`completed == false`: it failed,
/// and a dump follows) as started and never completed. The one lock of an operation.
#[inline]
pub(crate) fn finish(started: Started, op: Op, completed: bool) {
    let Some(r) = recorder() else { return };
    let done = if completed { ticks() } else { 0 };
    r.ring.lock().unwrap().record(started, op, completed, done);
}

/// Writes the dump after a failure, if dumps are on (Note [Flight recorder]); returns where.
/// A dump that cannot be written is reported on stderr, never an error of the job.
pub(crate) fn dump_on_failure() -> Option<PathBuf> {
    let r = recorder()?;
    let prefix = r.prefix.as_deref()?;
    let (bytes, rank) = {
        let ring = r.ring.lock().unwrap();
        (dump::encode(&ring), dump::job_rank(&ring))
    };
    dump::write(prefix, rank, &bytes)
}
