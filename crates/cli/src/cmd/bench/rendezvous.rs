//! `phalanx bench rendezvous`: how long one store takes to rendezvous N ranks, and how much
//! store traffic that costs. Each rank is a thread with its own authenticated TCP connection
//! (as a process would have); the store is a real [`StoreServer`] on loopback, or, with
//! `--rdzv-backend etcd --rdzv-endpoint h1:p1,…`, an etcd cluster (each rank its own client;
//! requests counted by the clients, watches included). Each repetition
//! runs the rank-level exchange a job's ranks run in `init_process_group` (peer table and the
//! shared-memory vote, Note [Leader gather] in phalanx-pg) on fresh keys.
//!
//! Note [Ranks in several processes]
//! On the native store each connection takes a descriptor at each end. When the ranks and the
//! store do not fit one process's `ulimit -n` together (16,384 ranks need 32,768; the hard
//! limit here is 20,000), the bench keeps the store and starts child processes of itself
//! (`--part-of`, hidden), each holding as many ranks' connections as its limit allows (one
//! child, while the store's own connections fit the parent). The parent tells every child to spawn its rank threads (`prep`), waits until all are ready,
//! starts the clock and releases them (`go`). The clock stops at the moment the last rank had
//! its answer (each rank notes it on the machine's monotonic clock, which every process
//! shares), not when its thread was joined: 16,384 threads exiting (their stacks unmapped, a
//! TLB shootdown each) took longer than the rendezvous itself. A child reads its orders from
//! stdin, so it ends when the parent does.

use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio},
    sync::{
        atomic::{AtomicU32, AtomicUsize, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{bail, Context};
use phalanx_pg::bootstrap::{exchange, vote, Peer};
use phalanx_store::{
    Auth, EtcdOptions, EtcdStore, PrefixStore, ServerConfig, Store, StoreServer, TcpStore,
};

/// Flags of `phalanx bench rendezvous`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Ranks (threads, one store connection each).
    #[arg(long, default_value_t = 1024)]
    ranks: usize,
    /// Timed repetitions (the median is reported).
    #[arg(long, default_value_t = 5)]
    iters: usize,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// `native` (phalanx's store, the default) or `etcd` (with --rdzv-endpoint).
    #[arg(long = "rdzv-backend", default_value = "native")]
    backend: String,
    /// `etcd`: the members' client endpoints, `h1:p1,h2:p2,…`.
    #[arg(long = "rdzv-endpoint")]
    endpoint: Option<String>,
    /// A child's store address (Note [Ranks in several processes]).
    #[arg(long = "part-of", hide = true)]
    part_of: Option<String>,
    /// A child's first rank.
    #[arg(long = "part-first", hide = true, default_value_t = 0)]
    part_first: usize,
    /// A child's number of ranks.
    #[arg(long = "part-ranks", hide = true, default_value_t = 0)]
    part_ranks: usize,
}

/// The store the ranks meet in: phalanx's server on loopback (its ranks' connections in this
/// process, or in child processes), or an etcd cluster.
enum Meeting {
    Native(StoreServer, Vec<Arc<TcpStore>>),
    NativeParts(StoreServer, Parts),
    Etcd(Vec<Arc<EtcdStore>>),
}

impl Meeting {
    fn clients(&self) -> Vec<Arc<dyn Store>> {
        match self {
            Meeting::Native(_, c) => c.iter().map(|c| c.clone() as Arc<dyn Store>).collect(),
            Meeting::NativeParts(..) => Vec::new(),
            Meeting::Etcd(c) => c.iter().map(|c| c.clone() as Arc<dyn Store>).collect(),
        }
    }

    /// Requests so far: the server's count, or the etcd clients' sum.
    fn requests(&self) -> u64 {
        match self {
            Meeting::Native(server, _) | Meeting::NativeParts(server, _) => server.stats().requests,
            Meeting::Etcd(c) => c.iter().map(|c| c.requests()).sum(),
        }
    }

    /// How many child processes hold the ranks (0: this one does).
    fn child_processes(&self) -> usize {
        match self {
            Meeting::NativeParts(_, parts) => parts.children.len(),
            _ => 0,
        }
    }

    /// Runs repetition `it` and returns its time.
    fn repeat(&mut self, it: usize, world: usize, timeout: Duration) -> anyhow::Result<f64> {
        if let Meeting::NativeParts(_, parts) = self {
            return parts.repeat(it);
        }
        let clients = self.clients();
        let (start, handles) = spawn_ranks(&clients, 0, world, it, timeout)?;
        start.all_there(handles.len());
        let t0 = monotonic_ns();
        start.open();
        let last = join_ranks(handles)?;
        Ok(seconds(last.saturating_sub(t0)))
    }
}

/// The child processes that hold the ranks' connections (Note [Ranks in several processes]).
struct Parts {
    children: Vec<(Child, ChildStdin, BufReader<ChildStdout>)>,
}

impl Parts {
    /// Starts children of this binary holding `world` ranks' connections to `addr`, at most
    /// `per_child` each.
    fn start(addr: &str, auth: &Auth, world: usize, per_child: usize) -> anyhow::Result<Parts> {
        let exe = std::env::current_exe().context("finding this program to start its parts")?;
        let mut parts = Parts {
            children: Vec::new(),
        };
        for first in (0..world).step_by(per_child) {
            let n = per_child.min(world - first);
            let mut child = Command::new(&exe)
                .args(["bench", "rendezvous", "--part-of", addr])
                .args(["--ranks", &world.to_string()])
                .args(["--part-first", &first.to_string()])
                .args(["--part-ranks", &n.to_string()])
                .envs(auth.env_vars())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .with_context(|| {
                    format!("starting the part that holds ranks {first}..{}", first + n)
                })?;
            let stdin = child.stdin.take().expect("piped");
            let stdout = BufReader::new(child.stdout.take().expect("piped"));
            parts.children.push((child, stdin, stdout));
        }
        parts.expect_all("connected")?;
        Ok(parts)
    }

    fn repeat(&mut self, it: usize) -> anyhow::Result<f64> {
        self.tell_all(&format!("prep {it}"))?;
        self.expect_all(&format!("ready {it}"))?;
        let t0 = monotonic_ns();
        self.tell_all(&format!("go {it}"))?;
        let last = self.expect_all(&format!("done {it}"))?;
        Ok(seconds(last.saturating_sub(t0)))
    }

    fn tell_all(&mut self, line: &str) -> anyhow::Result<()> {
        for (i, (_, stdin, _)) in self.children.iter_mut().enumerate() {
            writeln!(stdin, "{line}").with_context(|| format!("part {i} is gone"))?;
        }
        Ok(())
    }

    /// Reads `want` from every child, each line optionally followed by a number: returns the
    /// largest.
    fn expect_all(&mut self, want: &str) -> anyhow::Result<u64> {
        let mut most = 0;
        for (i, (_, _, stdout)) in self.children.iter_mut().enumerate() {
            let mut line = String::new();
            stdout.read_line(&mut line)?;
            let said = line.trim();
            let number = said.strip_prefix(want).map(str::trim);
            match number.map(|n| {
                if n.is_empty() {
                    Ok(0)
                } else {
                    n.parse::<u64>()
                }
            }) {
                Some(Ok(n)) => most = most.max(n),
                _ => bail!("part {i} said {said:?} where {want:?} was due (its error is above)"),
            }
        }
        Ok(most)
    }
}

impl Drop for Parts {
    fn drop(&mut self) {
        for (child, ..) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A rank's thread: it returns the moment it had its answer ([`monotonic_ns`]).
type RankThread = JoinHandle<anyhow::Result<u64>>;

/// Spawns the threads of ranks `first..first + clients.len()`, each waiting at the returned
/// gate and returning when it had its answer ([`monotonic_ns`]).
fn spawn_ranks(
    clients: &[Arc<dyn Store>],
    first: usize,
    world: usize,
    it: usize,
    timeout: Duration,
) -> anyhow::Result<(Arc<Gate>, Vec<RankThread>)> {
    let start = Arc::new(Gate::default());
    let handles = clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let r = first + i;
            let store = PrefixStore::new(format!("iter{it}"), c.clone());
            let start = start.clone();
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || -> anyhow::Result<u64> {
                    let me = Peer {
                        addr: format!("127.0.0.1:{}", 1024 + r % 60_000).parse()?,
                        host: format!("bench/host-{}/0", r / 8),
                    };
                    start.wait();
                    let peers = exchange(&store, r, world, &me, timeout)?;
                    anyhow::ensure!(peers.len() == world, "rank {r}: short peer table");
                    // A process holds one table; N threads holding theirs through the vote
                    // held N tables at once.
                    drop(peers);
                    vote(&store, "vote", r, world, true, timeout)?;
                    Ok(monotonic_ns())
                })
                .with_context(|| {
                    format!("spawning rank {r}'s thread (threads are limited by kernel.pid_max and kernel.threads-max)")
                })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((start, handles))
}

/// Joins the rank threads; returns when the last one had its answer.
fn join_ranks(handles: Vec<RankThread>) -> anyhow::Result<u64> {
    let mut last = 0;
    for h in handles {
        last = last.max(h.join().expect("a rank thread panicked")?);
    }
    Ok(last)
}

/// Where the rank threads wait to start: one futex word that the bench opens with one wake-up
/// of them all. A `std::sync::Barrier` woke them onto its mutex, which they then took one at a
/// time, a context switch each: 0.5 s before the last of 16,384 ranks had started.
#[derive(Default)]
struct Gate {
    open: AtomicU32,
    waiting: AtomicUsize,
}

impl Gate {
    fn wait(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        while self.open.load(Ordering::Acquire) == 0 {
            // SAFETY: FUTEX_WAIT on a live, aligned u32 that stays put (the gate is in an Arc
            // every waiter holds); it returns at once if the word is no longer 0.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.open.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    0u32,
                    std::ptr::null::<libc::timespec>(),
                )
            };
        }
    }

    /// Returns once `n` threads have come to the gate.
    fn all_there(&self, n: usize) {
        while self.waiting.load(Ordering::SeqCst) < n {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn open(&self) {
        self.open.store(1, Ordering::Release);
        // SAFETY: FUTEX_WAKE on the same word; wakes every thread asleep on it.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.open.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                i32::MAX,
            )
        };
    }
}

/// Nanoseconds on `CLOCK_MONOTONIC`, which every process on the machine shares.
fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A child's life (Note [Ranks in several processes]): connect, then `prep`/`go` per
/// repetition until stdin closes.
fn run_part(args: &Args, addr: &str, timeout: Duration) -> anyhow::Result<ExitCode> {
    // A parent killed outright takes its child along, instead of leaving it to run out its
    // phase holding the parent's stderr.
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0u64,
            0u64,
            0u64,
        )
    };
    let auth = Auth::from_env();
    let first = args.part_first;
    let clients = connect_native(addr, &auth, first, args.part_ranks, timeout)?
        .into_iter()
        .map(|c| c as Arc<dyn Store>)
        .collect::<Vec<_>>();
    let mut out = std::io::stdout();
    writeln!(out, "connected")?;
    let mut pending = None;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        match line.split_once(' ') {
            Some(("prep", it)) => {
                let it: usize = it.parse().context("prep")?;
                let (start, handles) = spawn_ranks(&clients, first, args.ranks, it, timeout)?;
                start.all_there(handles.len());
                pending = Some((it, (start, handles)));
                writeln!(out, "ready {it}")?;
            }
            Some(("go", _)) => {
                let (it, (start, handles)) = pending.take().context("go before prep")?;
                start.open();
                let last = join_ranks(handles)?;
                writeln!(out, "done {it} {last}")?;
            }
            _ => bail!("unknown order {line:?}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn connect_native(
    addr: &str,
    auth: &Auth,
    first: usize,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<Arc<TcpStore>>> {
    (first..first + n)
        .map(|r| {
            TcpStore::connect(addr, auth, timeout)
                .map(Arc::new)
                .with_context(|| format!("rank {r} connecting to the store (raise `ulimit -n`?)"))
        })
        .collect()
}

/// The kernel's limits that a bench of `ranks` threads, each with a store connection thread,
/// runs into: a sentence naming the setting to raise, or `None`. Past them a thread fails to
/// start, and Rust's runtime aborts the process when a thread cannot map its signal stack ("failed
/// to set up alternative stack guard page"), naming nothing.
fn kernel_room(ranks: usize, in_process: bool, limits: &KernelLimits) -> Option<String> {
    // The store's thread per connection and the ranks' own, with room for the rest.
    let threads = 2 * ranks + 256;
    // Per thread: its stack and guard page, its signal stack and guard page.
    let in_one_process = if in_process { 2 * ranks } else { ranks };
    let maps = 4 * in_one_process + 2_000;
    let short = |name: &str, now: usize, want: usize| {
        Some(format!(
            "--ranks {ranks} needs about {want} of {name}, which is {now} here: raise it \
             (`sysctl -w {name}={}`)",
            (want * 3 / 2).next_power_of_two()
        ))
    };
    if limits.pid_max < threads + limits.threads_now {
        return short(
            "kernel.pid_max",
            limits.pid_max,
            threads + limits.threads_now,
        );
    }
    if limits.threads_max < threads + limits.threads_now {
        return short(
            "kernel.threads-max",
            limits.threads_max,
            threads + limits.threads_now,
        );
    }
    if limits.max_map_count < maps {
        return short("vm.max_map_count", limits.max_map_count, maps);
    }
    None
}

/// What [`kernel_room`] weighs, as `/proc` gives it.
struct KernelLimits {
    pid_max: usize,
    threads_max: usize,
    max_map_count: usize,
    /// Threads on the machine now (`/proc/loadavg`'s fourth field).
    threads_now: usize,
}

impl KernelLimits {
    /// This machine's; a value that cannot be read counts as no limit.
    fn read() -> KernelLimits {
        let number = |path: &str| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(usize::MAX / 4)
        };
        let threads_now = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|t| t.split_whitespace().nth(3)?.split('/').nth(1)?.parse().ok())
            .unwrap_or(0);
        KernelLimits {
            pid_max: number("/proc/sys/kernel/pid_max"),
            threads_max: number("/proc/sys/kernel/threads-max"),
            max_map_count: number("/proc/sys/vm/max_map_count"),
            threads_now,
        }
    }
}

/// This process's soft limit on open descriptors.
fn open_files_limit() -> usize {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return 1024;
    }
    usize::try_from(l.rlim_cur).unwrap_or(usize::MAX)
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !(1..=65_536).contains(&args.ranks) {
        bail!("--ranks {}: want 1..=65536", args.ranks);
    }
    if args.iters == 0 {
        bail!("--iters must be at least 1");
    }
    let timeout = Duration::from_secs(60);
    if let Some(addr) = &args.part_of {
        return run_part(&args, addr, timeout);
    }
    let mut meeting = match (args.backend.as_str(), &args.endpoint) {
        ("native", None) => {
            let auth = Auth::random("bench-rendezvous");
            let config = ServerConfig::default().with_max_connections(args.ranks + 64);
            let server = StoreServer::bind_with("127.0.0.1:0".parse()?, auth.clone(), config)
                .context("store")?;
            let addr = server.local_addr().to_string();
            // Each connection is a descriptor at each end, and a few more are this process's
            // own (Note [Ranks in several processes]).
            let spare = open_files_limit().saturating_sub(args.ranks + 64);
            if let Some(why) = kernel_room(args.ranks, spare >= args.ranks, &KernelLimits::read()) {
                bail!("{why}");
            }
            if spare >= args.ranks {
                let clients = connect_native(&addr, &auth, 0, args.ranks, timeout)?;
                Meeting::Native(server, clients)
            } else {
                let per_child = open_files_limit().saturating_sub(64);
                if spare == 0 || per_child == 0 {
                    bail!(
                        "--ranks {}: the store's {} connections do not fit this process's \
                         `ulimit -n` ({}); raise it",
                        args.ranks,
                        args.ranks,
                        open_files_limit()
                    );
                }
                let parts = Parts::start(&addr, &auth, args.ranks, per_child)?;
                Meeting::NativeParts(server, parts)
            }
        }
        ("etcd", Some(endpoints)) => {
            let job = format!("bench-rendezvous-{}", std::process::id());
            let mut o = EtcdOptions::new(endpoints, &job)?;
            o.connect_timeout = Duration::from_secs(10);
            let clients = (0..args.ranks)
                .map(|r| {
                    let c = EtcdStore::connect(&o)
                        .with_context(|| format!("rank {r} connecting to etcd"))?;
                    c.set_timeout(timeout);
                    Ok(Arc::new(c))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Meeting::Etcd(clients)
        }
        ("native", Some(_)) => bail!("--rdzv-endpoint is for --rdzv-backend etcd"),
        ("etcd", None) => bail!("--rdzv-backend etcd needs --rdzv-endpoint h1:p1[,h2:p2…]"),
        (other, _) => bail!("--rdzv-backend {other:?}: want native or etcd"),
    };
    let mut times = Vec::with_capacity(args.iters);
    let mut requests = Vec::with_capacity(args.iters);
    for it in 0..args.iters {
        let before = meeting.requests();
        times.push(meeting.repeat(it, args.ranks, timeout)?);
        requests.push(meeting.requests() - before);
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let per_rank = requests[0] as f64 / args.ranks as f64;
    if let Meeting::Etcd(c) = &meeting {
        // The bench's keys go with it.
        c[0].delete_prefix()?;
    }
    if args.json {
        /// A `--json` line.
        #[derive(serde::Serialize)]
        struct JsonRow<'a> {
            backend: &'a str,
            ranks: usize,
            median_s: f64,
            times_s: &'a [f64],
            /// Child processes holding the ranks, 0 when they run in this one (Note [Ranks in
            /// several processes]).
            child_processes: usize,
            store_requests: u64,
            requests_per_rank: f64,
        }
        let row = JsonRow {
            backend: &args.backend,
            ranks: args.ranks,
            median_s: median,
            times_s: &times,
            child_processes: meeting.child_processes(),
            store_requests: requests[0],
            requests_per_rank: per_rank,
        };
        println!("{}", serde_json::to_string(&row).expect("a row serialises"));
    } else {
        println!(
            "# phalanx bench rendezvous: {} ranks (threads{}, one store connection each), {} iters, store: {}",
            args.ranks,
            match meeting.child_processes() {
                0 => String::new(),
                n => format!(" in {n} child process(es)"),
            },
            args.iters,
            match &args.endpoint {
                Some(e) => format!("etcd at {e}"),
                None => "native".to_string(),
            }
        );
        println!(
            "median {:.3} s (min {:.3}, max {:.3}); {} store requests ({per_rank:.1} per rank)",
            median,
            sorted[0],
            sorted[sorted.len() - 1],
            requests[0]
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(pid_max: usize, max_map_count: usize) -> KernelLimits {
        KernelLimits {
            pid_max,
            threads_max: 192_739,
            max_map_count,
            threads_now: 300,
        }
    }

    #[test]
    fn the_kernel_setting_a_large_bench_needs_is_named() {
        // This machine's defaults: 16,384 ranks need 33,000 threads and 66,000 maps.
        let e = kernel_room(16_384, false, &limits(32_768, 65_530)).unwrap();
        assert!(e.contains("kernel.pid_max") && e.contains("32768"), "{e}");
        let e = kernel_room(16_384, false, &limits(100_000, 65_530)).unwrap();
        assert!(
            e.contains("vm.max_map_count") && e.contains("sysctl -w"),
            "{e}"
        );
        assert_eq!(kernel_room(16_384, false, &limits(100_000, 1 << 20)), None);
        // In one process, the maps of both kinds of threads add up.
        assert!(kernel_room(8_192, true, &limits(100_000, 65_530)).is_some());
        assert_eq!(kernel_room(4_096, true, &limits(32_768, 65_530)), None);
    }
}
