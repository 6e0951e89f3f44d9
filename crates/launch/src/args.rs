//! The flags of `phalanx launch` (torchrun's interface), their parsing and validation.
//!
//! Every flag can also be given as `PET_<FLAG>` (torchrun's and Kubeflow's convention), and the
//! underscore spellings torchrun accepts (`--nproc_per_node`) are aliases.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::rdzv::{RdzvBackend, RdzvConf, Spelling};
use crate::tee::{Streams, Tee};
use crate::Error;

/// Flags of `phalanx launch`, shared by every subcommand that launches itself (`train`, `bench`).
///
/// ```
/// use clap::Parser;
/// use phalanx_launch::LaunchArgs;
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     launch: LaunchArgs,
/// }
/// let cli = Cli::parse_from(["x", "--nproc-per-node", "2", "--nnodes", "1:1"]);
/// assert_eq!(cli.launch.nproc_per_node, 2);
/// assert_eq!(cli.launch.nnodes.max, 1);
/// ```
#[derive(clap::Args, Clone, Debug)]
pub struct LaunchArgs {
    /// Worker processes to start on this node: a number, or torchrun's `gpu` (one per GPU),
    /// `cpu` (one per CPU this process may run on) or `auto` (`gpu` when there are GPUs, else
    /// `cpu`).
    #[arg(long = "nproc-per-node", alias = "nproc_per_node", env = "PET_NPROC_PER_NODE",
          default_value = "1", value_parser = parse_nproc, help_heading = "Launch")]
    pub nproc_per_node: u32,

    /// Number of nodes (hosts) in the job: `N`, or `MIN:MAX` for an elastic job that starts
    /// once MIN nodes are in, admits later ones at the next round (into the running one under
    /// --fault-tolerance) and goes on after losing nodes while MIN remain (docs/launch.md,
    /// "Elastic membership").
    #[arg(long, env = "PET_NNODES", default_value = "1", value_parser = parse_nnodes,
          help_heading = "Launch")]
    pub nnodes: Nnodes,

    /// Elastic jobs: once MIN nodes are in a round, how long node 0 waits for more (up to
    /// MAX) before the round starts (torchrun's `last_call_timeout`).
    #[arg(long = "rdzv-last-call", alias = "rdzv_last_call", env = "PET_RDZV_LAST_CALL",
          default_value = "3", value_parser = parse_secs, help_heading = "Launch")]
    pub rdzv_last_call: Duration,

    /// Rank of this node, 0..nnodes (default 0). Node 0 hosts the rendezvous store. Under
    /// `--rdzv-backend c10d` nodes take ranks as they arrive instead.
    #[arg(
        long = "node-rank",
        alias = "node_rank",
        env = "PET_NODE_RANK",
        help_heading = "Launch"
    )]
    pub node_rank: Option<u32>,

    /// How the nodes meet (torchrun's flag): `static` (node 0 hosts the store at
    /// --master-addr:--master-port, every node gives --node-rank), `c10d` (the node at
    /// --rdzv-endpoint hosts it, the others take node ranks as they arrive) or `etcd` (an etcd
    /// cluster at --rdzv-endpoint holds the job's store, through its v3 API; every node takes
    /// its rank on arrival and none hosts anything). `etcd-v2` is refused (etcd 3.6 removed
    /// that API).
    #[arg(long = "rdzv-backend", alias = "rdzv_backend", env = "PET_RDZV_BACKEND",
          default_value = "static", value_parser = clap::value_parser!(RdzvBackend),
          help_heading = "Launch")]
    pub rdzv_backend: RdzvBackend,

    /// `HOST[:PORT]` of the rendezvous (torchrun's flag; c10d's port defaults to 29400). Under
    /// `static` it stands for --master-addr:--master-port; under `etcd` it is the members'
    /// client endpoints, `HOST:PORT[,HOST:PORT…]`, tried in turn.
    #[arg(
        long = "rdzv-endpoint",
        alias = "rdzv_endpoint",
        env = "PET_RDZV_ENDPOINT",
        help_heading = "Launch"
    )]
    pub rdzv_endpoint: Option<String>,

    /// torchrun's rendezvous options, `KEY=VALUE,...`: `timeout`/`join_timeout` (seconds to
    /// wait for the store and the nodes, instead of PHALANX_TIMEOUT), `last_call_timeout`
    /// (--rdzv-last-call), `is_host` (c10d: this node hosts the store); for etcd, `protocol`
    /// (`http`/`https`), `cacert`, `cert` and `key` (PEM files, TLS), `user` and `password`,
    /// and `quorum_timeout` (how long etcd may answer nothing before the job's store counts as
    /// lost; 5s). torchrun's other keys are accepted and named as unused; unknown keys are refused.
    #[arg(long = "rdzv-conf", alias = "rdzv_conf", env = "PET_RDZV_CONF", default_value = "",
          value_parser = clap::value_parser!(RdzvConf), help_heading = "Launch")]
    pub rdzv_conf: RdzvConf,

    /// Address of node 0; its agent binds the store to exactly this address.
    #[arg(
        long = "master-addr",
        alias = "master_addr",
        env = "PET_MASTER_ADDR",
        default_value = "127.0.0.1",
        help_heading = "Launch"
    )]
    pub master_addr: String,

    /// Port of the rendezvous store on node 0.
    #[arg(
        long = "master-port",
        alias = "master_port",
        env = "PET_MASTER_PORT",
        default_value_t = 29500,
        help_heading = "Launch"
    )]
    pub master_port: u16,

    /// Single-node job on 127.0.0.1 and a free port (ignores --master-addr/--master-port).
    #[arg(long, env = "PET_STANDALONE", value_parser = clap::builder::BoolishValueParser::new(),
          help_heading = "Launch")]
    pub standalone: bool,

    /// Restart the worker group up to K times after a failure (a new rendezvous round each time).
    /// Failures within --startup-window of a round's start do not count against K.
    #[arg(
        long = "max-restarts",
        alias = "max_restarts",
        env = "PET_MAX_RESTARTS",
        default_value_t = 0,
        help_heading = "Launch"
    )]
    pub max_restarts: u32,

    /// Per-step fault tolerance: a worker that dies is replaced alone (counted against
    /// --max-restarts) while the others keep their state in memory, re-form the process group
    /// with the replacement and continue from the last completed step; the replacement takes
    /// a peer's state. With --nnodes MIN:MAX a node that arrives is admitted into the running
    /// round the same way, and a lost one is left behind while MIN remain (docs/launch.md,
    /// "Fault tolerance"). The program must support it (`phalanx train` does; a Rust program
    /// through `phalanx_pg::FaultTolerance`).
    #[arg(
        long = "fault-tolerance",
        alias = "fault_tolerance",
        help_heading = "Launch"
    )]
    pub fault_tolerance: bool,

    /// How often the agent checks its workers and the other nodes, in seconds.
    #[arg(long = "monitor-interval", alias = "monitor_interval", env = "PET_MONITOR_INTERVAL",
          default_value = "0.1", value_parser = parse_secs, help_heading = "Launch")]
    pub monitor_interval: Duration,

    /// After a failure or signal, how long workers get between SIGTERM and SIGKILL, in seconds.
    #[arg(long = "grace-period", env = "PET_GRACE_PERIOD", default_value = "5",
          value_parser = parse_secs, help_heading = "Launch")]
    pub grace_period: Duration,

    /// A worker failure this soon (seconds) after its round started is a start-up failure:
    /// with --max-restarts > 0 it restarts the group without using up a restart (at most 3
    /// start-up failures in a row).
    #[arg(long = "startup-window", env = "PET_STARTUP_WINDOW", default_value = "1",
          value_parser = parse_secs, help_heading = "Launch")]
    pub startup_window: Duration,

    /// Write each worker's output to `D/<run_id>/attempt_<n>/<local_rank>/{stdout,stderr}.log`.
    #[arg(
        long = "log-dir",
        alias = "log_dir",
        env = "PET_LOG_DIR",
        help_heading = "Launch"
    )]
    pub log_dir: Option<PathBuf>,

    /// Which streams go to the --log-dir files as well as the console: 1 stdout, 2 stderr,
    /// 3 both, 0 none, or per local rank `0:1,1:2`. Default with --log-dir: 3.
    #[arg(long, env = "PET_TEE", num_args = 0..=1, default_missing_value = "3",
          value_parser = Tee::from_str, help_heading = "Launch")]
    pub tee: Option<Tee>,

    /// Which streams go to the --log-dir files *instead of* the console (torchrun's `-r`):
    /// same values as --tee.
    #[arg(short = 'r', long, env = "PET_REDIRECTS", value_parser = Tee::from_str,
          help_heading = "Launch")]
    pub redirects: Option<Tee>,

    /// This node's address as the other nodes reach it (torchrun's flag): what its workers
    /// publish for the mesh, instead of the address of the interface that routes to the master.
    #[arg(
        long = "local-addr",
        alias = "local_addr",
        env = "PET_LOCAL_ADDR",
        help_heading = "Launch"
    )]
    pub local_addr: Option<String>,

    /// The workers' role (torchrun's flag): `ROLE_NAME` and `${role_name}` in
    /// --log-line-prefix-template.
    #[arg(
        long,
        env = "PET_ROLE",
        default_value = "default",
        help_heading = "Launch"
    )]
    pub role: String,

    /// The signals the agent catches and forwards to its workers before stopping them
    /// (torchrun's flag), e.g. `SIGTERM,SIGINT,SIGUSR1` for Slurm's warning before a time
    /// limit (`--signal=B:USR1@T`).
    #[arg(long = "signals-to-handle", alias = "signals_to_handle",
          env = "PET_SIGNALS_TO_HANDLE", default_value = "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
          value_parser = crate::signals::parse_signals, help_heading = "Launch")]
    pub signals_to_handle: crate::signals::SignalSet,

    /// Show only these local ranks' output on the console, e.g. `0` or `0,2`
    /// (log files still get every rank).
    #[arg(
        long = "local-ranks-filter",
        alias = "local_ranks_filter",
        env = "PET_LOCAL_RANKS_FILTER",
        value_delimiter = ',',
        help_heading = "Launch"
    )]
    pub local_ranks_filter: Option<Vec<u32>>,

    /// The prefix of every console line of a worker (torchrun's flag): `${rank}`,
    /// `${local_rank}` and `${role_name}` are replaced; empty for none (`phalanx train --json`
    /// uses none, so that its lines are plain JSON). Default: `[rank ${rank}]: `.
    #[arg(
        long = "log-line-prefix-template",
        alias = "log_line_prefix_template",
        env = "PET_LOG_LINE_PREFIX_TEMPLATE",
        help_heading = "Launch"
    )]
    pub log_line_prefix_template: Option<String>,

    /// Serve PyTorch's TCPStore protocol (PyTorch workers' `init_process_group`) to workers on
    /// every node, not only to this host's. PyTorch's protocol has no authentication: anyone
    /// who reaches the store's port can then read and write the PyTorch workers' keys (never
    /// phalanx's own). Use on a network you trust.
    #[arg(long = "torch-store", alias = "torch_store", env = "PET_TORCH_STORE",
          value_parser = clap::builder::BoolishValueParser::new(), help_heading = "Launch")]
    pub torch_store: bool,

    /// Identifier of the job (PHALANX_JOB_ID, TORCHELASTIC_RUN_ID, log folder).
    /// Default: random; for multi-node jobs, derived from PHALANX_TOKEN so every node agrees.
    #[arg(
        long = "run-id",
        alias = "rdzv-id",
        alias = "rdzv_id",
        env = "PET_RUN_ID",
        help_heading = "Launch"
    )]
    pub run_id: Option<String>,
}

impl Default for LaunchArgs {
    fn default() -> Self {
        LaunchArgs {
            nproc_per_node: 1,
            nnodes: Nnodes::fixed(1),
            rdzv_last_call: Duration::from_secs(3),
            node_rank: None,
            rdzv_backend: RdzvBackend::Static,
            rdzv_endpoint: None,
            rdzv_conf: RdzvConf::default(),
            master_addr: "127.0.0.1".into(),
            master_port: 29500,
            standalone: false,
            max_restarts: 0,
            monitor_interval: Duration::from_millis(100),
            grace_period: Duration::from_secs(5),
            startup_window: Duration::from_secs(1),
            log_dir: None,
            tee: None,
            redirects: None,
            local_addr: None,
            role: "default".into(),
            signals_to_handle: crate::signals::SignalSet::default(),
            local_ranks_filter: None,
            log_line_prefix_template: None,
            torch_store: false,
            fault_tolerance: false,
            run_id: None,
        }
    }
}

impl LaunchArgs {
    /// The console prefix of global rank `rank`, local rank `local_rank`
    /// (`--log-line-prefix-template`).
    pub fn line_prefix(&self, rank: u32, local_rank: u32) -> String {
        match &self.log_line_prefix_template {
            None => format!("[rank {rank}]: "),
            Some(t) => t
                .replace("${rank}", &rank.to_string())
                .replace("${local_rank}", &local_rank.to_string())
                .replace("${role_name}", &self.role),
        }
    }

    /// Checks the combinations clap cannot: node rank in range, `--standalone` single-node,
    /// `--tee` only with `--log-dir`, filters naming existing local ranks.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |flag: &'static str, reason: String| Err(Error::BadFlag { flag, reason });
        if self.nnodes.min == 0 {
            return bad("--nnodes", "must be at least 1".into());
        }
        // Under c10d a given --node-rank is ignored (node ranks are taken on arrival).
        if self.node_rank() >= self.nnodes.max && self.rdzv_backend == RdzvBackend::Static {
            return bad(
                "--node-rank",
                format!("{} is not below --nnodes {}", self.node_rank(), self.nnodes),
            );
        }
        let etcd_keys = self.rdzv_conf.etcd_keys();
        if !etcd_keys.is_empty() && self.rdzv_backend != RdzvBackend::Etcd {
            return bad(
                "--rdzv-conf",
                format!("{} apply only to --rdzv-backend etcd", etcd_keys.join(", ")),
            );
        }
        if self.torch_store && self.rdzv_backend == RdzvBackend::Etcd {
            return bad(
                "--torch-store",
                "serves PyTorch workers from an agent's store, and under --rdzv-backend etcd no \
                 agent hosts one: PyTorch's rank 0 hosts its TCPStore at MASTER_ADDR:MASTER_PORT \
                 (node 0's address), as under torchrun's etcd backend"
                    .into(),
            );
        }
        if self.redirects.is_some() && self.log_dir.is_none() {
            return bad(
                "--redirects",
                "needs --log-dir to know where to write".into(),
            );
        }
        if self.role.is_empty() {
            return bad("--role", "must not be empty".into());
        }
        if self.standalone && self.nnodes.max != 1 {
            return bad(
                "--standalone",
                format!("is single-node, but --nnodes is {}", self.nnodes),
            );
        }
        if self.tee.is_some() && self.log_dir.is_none() {
            return bad("--tee", "needs --log-dir to know where to write".into());
        }
        if self.monitor_interval.is_zero() {
            return bad("--monitor-interval", "must be positive".into());
        }
        if let Some(lr) = self
            .local_ranks_filter
            .iter()
            .flatten()
            .find(|&&lr| lr >= self.nproc_per_node)
        {
            return bad(
                "--local-ranks-filter",
                format!(
                    "local rank {lr} does not exist with --nproc-per-node {}",
                    self.nproc_per_node
                ),
            );
        }
        Ok(())
    }

    /// The rendezvous flags, for `rdzv/`.
    pub(crate) fn spelling(&self) -> Spelling {
        Spelling {
            backend: self.rdzv_backend,
            endpoint: self.rdzv_endpoint.clone(),
            is_host: self.rdzv_conf.is_host,
            standalone: self.standalone,
            node_rank: self.node_rank,
            nnodes_max: self.nnodes.max,
            master_addr: self.master_addr.clone(),
            master_port: self.master_port,
        }
    }

    /// Whether rounds are made of whichever nodes are there (Note [Elastic rounds]): an
    /// elastic `--nnodes MIN:MAX`, and every multi-node c10d or etcd job, whose nodes may leave
    /// and come back (a restarted node joins the next round, as with torchrun's c10d
    /// rendezvous).
    pub fn dynamic_rounds(&self) -> bool {
        self.nnodes.is_elastic()
            || (matches!(self.rdzv_backend, RdzvBackend::C10d | RdzvBackend::Etcd)
                && self.nnodes.max > 1)
    }

    /// This node's rank (`--node-rank`, 0 when not given).
    pub fn node_rank(&self) -> u32 {
        self.node_rank.unwrap_or(0)
    }

    /// The streams of `local_rank` that go to log files instead of the console
    /// (`--redirects`).
    pub fn redirected_streams(&self, local_rank: u32) -> Streams {
        match &self.redirects {
            None => Streams::NONE,
            Some(r) => r.for_local_rank(local_rank),
        }
    }

    /// Whether `local_rank`'s output is shown on the console.
    pub fn shows(&self, local_rank: u32) -> bool {
        self.local_ranks_filter
            .as_ref()
            .is_none_or(|f| f.contains(&local_rank))
    }

    /// Which streams of `local_rank` go to log files (none without `--log-dir`).
    pub fn logged_streams(&self, local_rank: u32) -> Streams {
        match (&self.log_dir, &self.tee) {
            (None, _) => Streams::NONE,
            (Some(_), None) => Streams::BOTH,
            (Some(_), Some(t)) => {
                t.for_local_rank(local_rank) | self.redirected_streams(local_rank)
            }
        }
    }
}

/// `argv` without the flags of [`LaunchArgs`] and their values (`--node-rank 1`,
/// `--master-port=29500`): what stays is the same on every node of a job.
pub(crate) fn without_launch_flags(argv: &[std::ffi::OsString]) -> Vec<std::ffi::OsString> {
    use clap::Args;
    let cmd = LaunchArgs::augment_args(clap::Command::new("launch"));
    let mut flags = std::collections::HashMap::new();
    for a in cmd.get_arguments() {
        let takes = a.get_action().takes_values();
        let aliases = a.get_all_aliases().unwrap_or_default();
        for long in a.get_long().into_iter().chain(aliases) {
            flags.insert(format!("--{long}"), takes);
        }
    }
    let mut out = Vec::with_capacity(argv.len());
    let mut it = argv.iter().peekable();
    while let Some(a) = it.next() {
        let text = a.to_string_lossy();
        if text == "--" {
            out.push(a.clone());
            out.extend(it.cloned());
            break;
        }
        let name = text.split_once('=').map_or(&*text, |(n, _)| n);
        match flags.get(name) {
            Some(&takes) => {
                let next_is_value = it
                    .peek()
                    .is_some_and(|n| !n.to_string_lossy().starts_with('-'));
                if takes && !text.contains('=') && next_is_value {
                    it.next();
                }
            }
            None => out.push(a.clone()),
        }
    }
    out
}

/// `--nnodes`: how many nodes a round may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nnodes {
    /// A round starts once this many nodes are in; fewer, and the job ends.
    pub min: u32,
    /// A round never has more; node ranks are below it.
    pub max: u32,
}

impl Nnodes {
    /// Exactly `n` nodes.
    pub fn fixed(n: u32) -> Nnodes {
        Nnodes { min: n, max: n }
    }

    /// Whether the node count may change between rounds (`MIN:MAX` with MIN < MAX).
    pub fn is_elastic(&self) -> bool {
        self.min != self.max
    }
}

impl std::fmt::Display for Nnodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.is_elastic() {
            true => write!(f, "{}:{}", self.min, self.max),
            false => write!(f, "{}", self.max),
        }
    }
}

/// `--nnodes`: `N`, `N:N`, or an elastic `MIN:MAX`.
pub(crate) fn parse_nnodes(text: &str) -> Result<Nnodes, String> {
    let num = |t: &str| {
        t.trim()
            .parse::<u32>()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| format!("{t:?} is not a node count (a positive integer)"))
    };
    match text.split_once(':') {
        None => num(text).map(Nnodes::fixed),
        Some((lo, hi)) => {
            let (lo, hi) = (num(lo)?, num(hi)?);
            if lo > hi {
                return Err(format!(
                    "{lo}:{hi} has MIN larger than MAX (MIN:MAX, e.g. 2:4)"
                ));
            }
            Ok(Nnodes { min: lo, max: hi })
        }
    }
}

/// `--nproc-per-node`: a positive number, `gpu`, `cpu` or `auto` (torchrun's values).
pub(crate) fn parse_nproc(text: &str) -> Result<u32, String> {
    let cpus = || {
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1)
    };
    match text.trim() {
        "cpu" => Ok(cpus()),
        "gpu" => match gpu_count() {
            0 => Err(format!(
                "gpu: no GPU is visible on this node ({}); give a number, `cpu` or `auto`",
                gpu_visibility()
            )),
            n => Ok(n),
        },
        "auto" => Ok(match gpu_count() {
            0 => cpus(),
            n => n,
        }),
        n => match n.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!(
                "{n:?} is not a process count (a positive number, or gpu, cpu, auto)"
            )),
        },
    }
}

/// GPUs this node's workers can use: the NVIDIA devices (`/dev/nvidiaN`, without loading
/// CUDA), as many as `CUDA_VISIBLE_DEVICES` leaves visible when it is set.
fn gpu_count() -> u32 {
    let devices = std::fs::read_dir("/dev")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.strip_prefix("nvidia")
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                })
                .count() as u32
        })
        .unwrap_or(0);
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        // CUDA stops at the first entry that is not a device (`-1` hides every GPU).
        Ok(v) => v
            .split(',')
            .take_while(|d| !d.trim().is_empty() && !d.trim().starts_with('-'))
            .count()
            .min(devices as usize) as u32,
        Err(_) => devices,
    }
}

/// What `gpu_count` looked at, for its error.
fn gpu_visibility() -> String {
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => format!("no /dev/nvidiaN device, or CUDA_VISIBLE_DEVICES={v:?} hides them"),
        Err(_) => "no /dev/nvidiaN device".into(),
    }
}

/// Seconds as a number (`0.1`) or with a unit (`100ms`, `5s`).
pub(crate) fn parse_secs(text: &str) -> Result<Duration, String> {
    phalanx_core::parse_duration(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        launch: LaunchArgs,
    }

    fn parse(args: &[&str]) -> Result<LaunchArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).map(|c| c.launch)
    }

    #[test]
    fn defaults_match_torchrun() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.nproc_per_node, 1);
        assert_eq!(a.nnodes, Nnodes::fixed(1));
        assert_eq!(a.node_rank(), 0);
        assert_eq!(a.master_addr, "127.0.0.1");
        assert_eq!(a.master_port, 29500);
        assert_eq!(a.max_restarts, 0);
        assert_eq!(a.monitor_interval, Duration::from_millis(100));
        assert!(!a.standalone);
        assert!(a.validate().is_ok());
    }

    #[test]
    fn nnodes_static_form() {
        assert_eq!(parse_nnodes("1").unwrap(), Nnodes::fixed(1));
        assert_eq!(parse_nnodes("1:1").unwrap(), Nnodes::fixed(1));
        assert_eq!(parse_nnodes("4:4").unwrap(), Nnodes::fixed(4));
        let elastic = parse_nnodes("1:4").unwrap();
        assert_eq!(elastic, Nnodes { min: 1, max: 4 });
        assert!(elastic.is_elastic() && elastic.to_string() == "1:4");
        assert!(parse_nnodes("0").is_err());
        assert!(parse_nnodes("x").is_err());
        assert_eq!(parse(&["--nnodes", "2:3"]).unwrap().nnodes.max, 3);
        let e = parse_nnodes("3:2").unwrap_err();
        assert!(e.contains("MIN larger than MAX"), "{e}");
        assert!(parse_nnodes("0:2")
            .unwrap_err()
            .contains("positive integer"));
        assert_eq!(
            parse(&["--nnodes", "3:3"]).unwrap().nnodes,
            Nnodes::fixed(3)
        );
    }

    #[test]
    fn launch_flags_are_left_out_of_what_nodes_compare() {
        let argv: Vec<std::ffi::OsString> = [
            "phalanx",
            "train",
            "--nnodes",
            "2:3",
            "--node-rank=1",
            "--nproc_per_node",
            "4",
            "--standalone",
            "--epochs",
            "3",
            "--tee",
            "--log-dir",
            "/tmp/x",
            "--hidden",
            "64",
        ]
        .map(Into::into)
        .to_vec();
        let kept: Vec<String> = without_launch_flags(&argv)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            kept,
            ["phalanx", "train", "--epochs", "3", "--hidden", "64"]
        );
    }

    #[test]
    fn tee_flag_forms() {
        // A bare `--tee` means both streams.
        let a = parse(&["--log-dir", "/tmp/x", "--tee"]).unwrap();
        assert_eq!(a.tee, Some(Tee::All(Streams::BOTH)));
        let a = parse(&["--log-dir", "/tmp/x", "--tee", "0:2"]).unwrap();
        assert_eq!(a.logged_streams(0), Streams::STDERR);
        assert_eq!(a.logged_streams(1), Streams::NONE);
        // --log-dir alone logs both streams; no --log-dir logs nothing.
        let a = parse(&["--log-dir", "/tmp/x"]).unwrap();
        assert_eq!(a.logged_streams(5), Streams::BOTH);
        assert_eq!(parse(&[]).unwrap().logged_streams(0), Streams::NONE);
    }

    #[test]
    fn tee_needs_log_dir() {
        let a = parse(&["--tee", "1"]).unwrap();
        let e = a.validate().unwrap_err().to_string();
        assert!(e.contains("--tee") && e.contains("--log-dir"), "{e}");
    }

    #[test]
    fn local_ranks_filter() {
        let a = parse(&["--nproc-per-node", "4", "--local-ranks-filter", "0,2"]).unwrap();
        assert_eq!(a.local_ranks_filter, Some(vec![0, 2]));
        assert!(a.shows(0) && !a.shows(1) && a.shows(2) && !a.shows(3));
        assert!(a.validate().is_ok());
        let a = parse(&["--nproc-per-node", "2", "--local-ranks-filter", "3"]).unwrap();
        assert!(a
            .validate()
            .unwrap_err()
            .to_string()
            .contains("local rank 3"));
        assert!(parse(&["--local-ranks-filter", "a"]).is_err());
        assert!(parse(&[]).unwrap().shows(7));
    }

    #[test]
    fn validation_errors_name_the_flag() {
        let a = parse(&["--nnodes", "2", "--node-rank", "2"]).unwrap();
        assert!(a
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--node-rank"));
        let a = parse(&["--nnodes", "2", "--standalone"]).unwrap();
        assert!(a
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--standalone"));
        assert!(parse(&["--nproc-per-node", "0"]).is_err());
        assert!(parse(&["--monitor-interval", "0"]).is_err());
    }

    #[test]
    fn torchrun_spellings_and_units() {
        let a = parse(&[
            "--nproc_per_node",
            "3",
            "--node_rank",
            "0",
            "--master_addr",
            "10.0.0.1",
            "--monitor-interval",
            "50ms",
            "--grace-period",
            "2",
            "--rdzv-id",
            "job9",
        ])
        .unwrap();
        assert_eq!(a.nproc_per_node, 3);
        assert_eq!(a.master_addr, "10.0.0.1");
        assert_eq!(a.monitor_interval, Duration::from_millis(50));
        assert_eq!(a.grace_period, Duration::from_secs(2));
        assert_eq!(a.run_id.as_deref(), Some("job9"));
    }
}
