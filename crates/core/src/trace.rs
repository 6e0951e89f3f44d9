//! A timeline: `PHALANX_TRACE=PATH` records spans (compute, pack, each collective with its
//! bytes and algorithm, waits) and writes one Chrome/Perfetto trace per rank to
//! `PATH.rank<N>.json` (open it in <https://ui.perfetto.dev> or `chrome://tracing`).
//!
//! When the variable is unset, [`span`] is one relaxed atomic load and records nothing.
//!
//! ```
//! use phalanx_core::trace;
//! let _guard = trace::span("compute", "train"); // no-op unless PHALANX_TRACE is set
//! ```

use std::{
    cell::Cell,
    fs,
    io::Write,
    path::PathBuf,
    sync::{
        atomic::{AtomicU64, AtomicU8, Ordering},
        Mutex, OnceLock,
    },
    time::Instant,
};

use crate::env;

struct Event {
    name: String,
    cat: &'static str,
    ts_us: f64,
    dur_us: f64,
    tid: u64,
    args: String,
}

struct Tracer {
    start: Instant,
    events: Mutex<Vec<Event>>,
    path: PathBuf,
}

// 0 = not yet checked, 1 = off, 2 = on.
static STATE: AtomicU8 = AtomicU8::new(0);
static TRACER: OnceLock<Tracer> = OnceLock::new();
static NEXT_TID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static TID: Cell<u64> = const { Cell::new(0) };
}

fn tracer() -> Option<&'static Tracer> {
    match STATE.load(Ordering::Relaxed) {
        1 => None,
        2 => TRACER.get(),
        _ => {
            let t = env::get(env::PHALANX_TRACE).map(|p| {
                TRACER.get_or_init(|| Tracer {
                    start: Instant::now(),
                    events: Mutex::new(Vec::new()),
                    path: PathBuf::from(p),
                })
            });
            STATE.store(if t.is_some() { 2 } else { 1 }, Ordering::Relaxed);
            t
        }
    }
}

/// Whether tracing is on.
pub fn enabled() -> bool {
    tracer().is_some()
}

fn tid() -> u64 {
    TID.with(|t| {
        if t.get() == 0 {
            t.set(NEXT_TID.fetch_add(1, Ordering::Relaxed));
        }
        t.get()
    })
}

/// A span that ends when dropped.
#[must_use = "the span ends when this guard is dropped"]
pub struct Span {
    inner: Option<(String, &'static str, Instant, String)>,
}

impl Span {
    /// Attaches `key=value` (shown in the trace viewer's details).
    pub fn arg(mut self, key: &str, value: impl std::fmt::Display) -> Self {
        if let Some((_, _, _, args)) = &mut self.inner {
            if !args.is_empty() {
                args.push(',');
            }
            args.push_str(&format!("{:?}:{:?}", key, value.to_string()));
        }
        self
    }
}

/// Starts a span named `name` in category `cat` (`compute`, `pack`, `collective`, `wait`).
pub fn span(name: impl Into<String>, cat: &'static str) -> Span {
    Span {
        inner: tracer().map(|_| (name.into(), cat, Instant::now(), String::new())),
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if let (Some((name, cat, begin, args)), Some(t)) = (self.inner.take(), tracer()) {
            let ts_us = begin.duration_since(t.start).as_secs_f64() * 1e6;
            let dur_us = begin.elapsed().as_secs_f64() * 1e6;
            t.events.lock().unwrap().push(Event {
                name,
                cat,
                ts_us,
                dur_us,
                tid: tid(),
                args,
            });
        }
    }
}

/// Writes the trace of this process as `PATH.rank<rank>.json`; later events are appended
/// by a later flush (the file is rewritten with everything recorded so far).
pub fn flush(rank: usize) -> std::io::Result<Option<PathBuf>> {
    let Some(t) = tracer() else { return Ok(None) };
    let path = PathBuf::from(format!("{}.rank{rank}.json", t.path.display()));
    let events = t.events.lock().unwrap();
    let mut out = Vec::with_capacity(events.len() * 120 + 64);
    out.extend_from_slice(b"{\"traceEvents\":[\n");
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",\n");
        }
        write!(
            out,
            "{{\"name\":{:?},\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":{rank},\"tid\":{},\"args\":{{{}}}}}",
            e.name, e.cat, e.ts_us, e.dur_us, e.tid, e.args
        )?;
    }
    out.extend_from_slice(b"\n],\"displayTimeUnit\":\"ms\"}\n");
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    fs::write(&path, out)?;
    Ok(Some(path))
}
