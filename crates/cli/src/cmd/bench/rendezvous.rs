//! `phalanx bench rendezvous`: how long one store takes to rendezvous N ranks, and how much
//! store traffic that costs. Each rank is a thread with its own authenticated TCP connection
//! (as a process would have); the store is a real [`StoreServer`] on loopback, or, with
//! `--rdzv-backend etcd --rdzv-endpoint h1:p1,…`, an etcd cluster (each rank its own client;
//! requests counted by the clients, watches included). Each repetition
//! runs the rank-level exchange a job's ranks run in `init_process_group` (peer table and the
//! shared-memory vote, Note [Leader gather] in phalanx-pg) on fresh keys.

use std::{
    process::ExitCode,
    sync::{Arc, Barrier},
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use phalanx_pg::bootstrap::{exchange, vote, Peer};
use phalanx_store::{Auth, EtcdOptions, EtcdStore, PrefixStore, Store, StoreServer, TcpStore};

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
}

/// The store the ranks meet in: phalanx's server on loopback, or an etcd cluster.
enum Meeting {
    Native(StoreServer, Vec<Arc<TcpStore>>),
    Etcd(Vec<Arc<EtcdStore>>),
}

impl Meeting {
    fn clients(&self) -> Vec<Arc<dyn Store>> {
        match self {
            Meeting::Native(_, c) => c.iter().map(|c| c.clone() as Arc<dyn Store>).collect(),
            Meeting::Etcd(c) => c.iter().map(|c| c.clone() as Arc<dyn Store>).collect(),
        }
    }

    /// Requests so far: the server's count, or the etcd clients' sum.
    fn requests(&self) -> u64 {
        match self {
            Meeting::Native(server, _) => server.stats().requests,
            Meeting::Etcd(c) => c.iter().map(|c| c.requests()).sum(),
        }
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !(1..=65_536).contains(&args.ranks) {
        bail!("--ranks {}: want 1..=65536", args.ranks);
    }
    if args.iters == 0 {
        bail!("--iters must be at least 1");
    }
    let timeout = Duration::from_secs(60);
    let meeting = match (args.backend.as_str(), &args.endpoint) {
        ("native", None) => {
            let auth = Auth::random("bench-rendezvous");
            let server =
                StoreServer::bind("127.0.0.1:0".parse()?, auth.clone()).context("store")?;
            let addr = server.local_addr().to_string();
            let clients = (0..args.ranks)
                .map(|r| {
                    TcpStore::connect(&addr, &auth, timeout)
                        .map(Arc::new)
                        .with_context(|| {
                            format!("rank {r} connecting to the store (raise `ulimit -n`?)")
                        })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Meeting::Native(server, clients)
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
    let clients = meeting.clients();
    let mut times = Vec::with_capacity(args.iters);
    let mut requests = Vec::with_capacity(args.iters);
    for it in 0..args.iters {
        let before = meeting.requests();
        let start = Arc::new(Barrier::new(args.ranks + 1));
        let handles = clients
            .iter()
            .enumerate()
            .map(|(r, c)| {
                let store = PrefixStore::new(format!("iter{it}"), c.clone());
                let (start, world) = (start.clone(), args.ranks);
                std::thread::Builder::new()
                    .stack_size(256 * 1024)
                    .spawn(move || -> anyhow::Result<()> {
                        let me = Peer {
                            addr: format!("127.0.0.1:{}", 1024 + r % 60_000).parse()?,
                            host: format!("bench/host-{}/0", r / 8),
                        };
                        start.wait();
                        let peers = exchange(&store, r, world, &me, timeout)?;
                        anyhow::ensure!(peers.len() == world, "rank {r}: short peer table");
                        // A process holds one table; N threads holding theirs through the
                        // vote held N² entries at once (1.3 GB at 4,096 ranks).
                        drop(peers);
                        vote(&store, "vote", r, world, true, timeout)?;
                        Ok(())
                    })
                    .context("spawning a rank thread")
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        start.wait();
        let t0 = Instant::now();
        for h in handles {
            h.join().expect("a rank thread panicked")?;
        }
        times.push(t0.elapsed().as_secs_f64());
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
            store_requests: u64,
            requests_per_rank: f64,
        }
        let row = JsonRow {
            backend: &args.backend,
            ranks: args.ranks,
            median_s: median,
            times_s: &times,
            store_requests: requests[0],
            requests_per_rank: per_rank,
        };
        println!("{}", serde_json::to_string(&row).expect("a row serialises"));
    } else {
        println!(
            "# phalanx bench rendezvous: {} ranks (threads, one store connection each), {} iters, store: {}",
            args.ranks,
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
