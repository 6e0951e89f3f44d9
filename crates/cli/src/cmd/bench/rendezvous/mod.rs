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
//! TLB shootdown each) took longer than the rendezvous itself; the threads exit only after the
//! last answer, in every child (`leave`, Note [Ranks leave after the clock stops] in
//! `ranks.rs`). A child reads its orders from stdin, so it ends when the parent does.

use std::{
    io::{BufRead, Write},
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

mod limits;
mod parts;
mod ranks;
mod timing;

use anyhow::{bail, Context};
use limits::{kernel_room, open_files_limit, KernelLimits};
use parts::Parts;
use ranks::Ranks;
use timing::{monotonic_ns, seconds};

use phalanx_store::{Auth, EtcdOptions, EtcdStore, ServerConfig, Store, StoreServer, TcpStore};

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
        let ranks = Ranks::spawn(&self.clients(), 0, world, it, timeout)?;
        let t0 = monotonic_ns();
        let last = ranks.answered();
        ranks.leave()?;
        Ok(seconds(last.saturating_sub(t0)))
    }
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
                let ranks = Ranks::spawn(&clients, first, args.ranks, it, timeout)?;
                pending = Some((it, ranks, false));
                writeln!(out, "ready {it}")?;
            }
            Some(("go", _)) => {
                let (it, ranks, went) = pending.as_mut().context("go before prep")?;
                *went = true;
                writeln!(out, "done {it} {}", ranks.answered())?;
            }
            Some(("leave", _)) => {
                // Threads still at the start line would never come to leave.
                let (it, ranks, true) = pending.take().context("leave before prep")? else {
                    bail!("leave before go");
                };
                ranks.leave()?;
                writeln!(out, "left {it}")?;
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
            if let Some(why) = kernel_room(args.ranks, &KernelLimits::read()) {
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
