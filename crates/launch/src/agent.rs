//! The node agent: hosts or joins the store, runs rendezvous rounds, starts the local workers
//! and restarts them after a failure while `--max-restarts` allows.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use phalanx_core::Timeout;
use phalanx_store::Auth;
use sha2::{Digest, Sha256};

use crate::elastic::coordinate::Coordinator;
use crate::elastic::links::Links;
use crate::elastic::Rules;
use crate::job::Job;
use crate::program::runs_python;
use crate::rdzv::{self, Arrival, Met};
use crate::round::{End, Round};
use crate::signals;
use crate::{Error, LaunchArgs};

/// Exit code of `phalanx launch` when the group failed again after `--max-restarts K > 0`
/// restarts ("failed after K restarts"). Without restarts the launcher exits with the failing
/// worker's own code (or 128 + its signal); after a signal to the agent, 128 + that signal.
pub const EXIT_RESTARTS_EXHAUSTED: u8 = 125;

/// Start-up failures in a row that may restart the group without using up `--max-restarts`;
/// past this, a program that cannot start at all fails like any other.
pub(crate) const MAX_STARTUP_FAILURES: u32 = 3;

/// Bound on each store call of the agents' control handle ([`Coordinator`]).
pub(crate) const CONTROL_TIMEOUT: Duration = Duration::from_secs(1);

/// One node's agent for the whole job.
pub(crate) struct Agent<'a> {
    /// What each round starts from.
    job: Job<'a>,
    /// This node's side of the conversation with the other agents.
    coord: Coordinator,
}

impl<'a> Agent<'a> {
    /// Hosts the store (node 0), connects to it (other nodes) or to etcd, as the rendezvous
    /// flags say (`rdzv/`).
    pub(crate) fn start(
        args: &'a LaunchArgs,
        program: &'a [OsString],
        signature: String,
    ) -> anyhow::Result<Self> {
        // Note [A launch plan resolved once]: the flags stay as given; what the rendezvous
        // decides (the node rank taken on arrival) and what `--rdzv-conf` overrides are the
        // job's own fields, not rewritten flags.
        let timeout = match args.rdzv_conf.join_timeout {
            Some(t) => t,
            None => Timeout::from_env()?,
        };
        for note in args.rdzv_conf.unused_notes() {
            eprintln!("phalanx launch: {note}");
        }
        let last_call = args.rdzv_conf.last_call.unwrap_or(args.rdzv_last_call);
        let token = if args.nnodes.max > 1 {
            let t = Auth::from_env().token;
            if t.is_empty() {
                return Err(Error::MissingToken {
                    nnodes: args.nnodes.max,
                }
                .into());
            }
            t
        } else {
            Auth::random("").token
        };
        let run_id = match &args.run_id {
            Some(id) => id.clone(),
            // Every node derives the same id from the shared secret without revealing it.
            None if args.nnodes.max > 1 => phalanx_core::hex::encode(
                &Sha256::digest([b"phalanx-run-id:".as_slice(), &token].concat())[..6],
            ),
            None => phalanx_core::hex::encode(&Auth::random("").token[..6]),
        };
        let auth = Auth::new(run_id.clone(), token);
        let mut rdzv = rdzv::backend(&args.spelling(), &|k| {
            std::env::var(k).ok().filter(|v| !v.is_empty())
        })?;
        let local_ifname = match &args.local_addr {
            Some(a) => Some(interface_of(a)?),
            None => None,
        };
        let host = rdzv::hostname();
        let nonce = phalanx_core::hex::encode(&Auth::random("").token[..8]);
        let met = rdzv.meet(&Arrival {
            auth: &auth,
            node_rank: args.node_rank(),
            nnodes_max: args.nnodes.max,
            me: format!("{host} {nonce}"),
            local_addr: args.local_addr.as_deref(),
            torch_store: args.torch_store,
            conf: &args.rdzv_conf,
            timeout,
            control_timeout: CONTROL_TIMEOUT,
        })?;
        let Met {
            node_rank,
            store,
            ctl,
            links_at,
            etcd,
            beat,
            watch,
        } = met;
        let set_omp = args.nproc_per_node > 1 && std::env::var_os("OMP_NUM_THREADS").is_none();
        if set_omp {
            eprintln!("{}", crate::worker_env::OMP_WARNING);
        }
        let mut coord = Coordinator::new(
            ctl.clone(),
            args.nnodes.max,
            node_rank,
            host.clone(),
            timeout,
            args.monitor_interval,
        )
        .with_store_grace(rdzv.store_grace());
        if let Some(beat) = beat {
            coord = coord.with_beat(beat);
        }
        if let Some(watch) = watch {
            coord = coord.with_watch(watch);
        }
        // Where any node may be lost, node 0 included (etcd), links tell the others at once
        // (Note [Agent links]).
        if let Some(ip) = links_at {
            match Links::start(&*ctl, node_rank, ip) {
                Ok(links) => coord = coord.with_links(links),
                Err(e) => eprintln!(
                    "phalanx launch: no link to the other agents ({e}); a lost node is noticed \
                     by its heartbeat alone"
                ),
            }
        }
        let ft_elastic = args.fault_tolerance && args.nnodes.is_elastic();
        let rules = Rules {
            nnodes: args.nnodes,
            last_call,
            timeout,
            fault_tolerance: ft_elastic && !runs_python(program),
            goes_on_if_told: ft_elastic && runs_python(program),
            store_host: rdzv.store_host(),
        };
        let job = Job {
            args,
            node_rank,
            rules,
            program,
            signature,
            run_id,
            token_hex: auth.token_hex(),
            rdzv,
            host,
            nonce,
            local_ifname,
            set_omp,
            store,
            etcd,
            timeout,
            restarts_used: Default::default(),
        };
        Ok(Agent { job, coord })
    }

    /// Runs rounds until the job succeeds, is stopped, or fails with no restart left.
    pub(crate) fn run(&self) -> anyhow::Result<ExitCode> {
        let k = self.job.args.max_restarts;
        let (mut round, mut startup_in_a_row) = (0u32, 0u32);
        loop {
            let (ran, end) = self.run_round(round)?;
            // Elastic rounds are numbered by the store (Note [Elastic rounds]).
            round = ran;
            match end {
                End::Success => return Ok(ExitCode::SUCCESS),
                // A membership change, not a failure: torchrun does not count it either.
                End::Rejoin => round += 1,
                End::Signal(sig) => return Ok(ExitCode::from(128 + sig as u8)),
                End::Failed(cause) => {
                    if !cause.restartable || k == 0 {
                        return Ok(ExitCode::from(cause.code));
                    }
                    if cause.startup && startup_in_a_row < MAX_STARTUP_FAILURES {
                        startup_in_a_row += 1;
                        eprintln!(
                            "phalanx launch: start-up failure {startup_in_a_row} of at most \
                             {MAX_STARTUP_FAILURES} in a row (within --startup-window {:?}); it \
                             does not count against --max-restarts {k}; starting attempt {}",
                            self.job.args.startup_window,
                            round + 1
                        );
                    } else if self.job.restarts_used.get() < k {
                        let used = self.job.restarts_used.get() + 1;
                        self.job.restarts_used.set(used);
                        // Only a round that got past its start-up window resets the count, so
                        // a program that never starts cannot earn free restarts forever.
                        if !cause.startup {
                            startup_in_a_row = 0;
                        }
                        eprintln!(
                            "phalanx launch: restart {used} of --max-restarts {k}: starting attempt {}",
                            round + 1
                        );
                    } else {
                        eprintln!(
                            "phalanx launch: failed after {k} restarts; last root cause: {}",
                            cause.headline()
                        );
                        return Ok(ExitCode::from(EXIT_RESTARTS_EXHAUSTED));
                    }
                    round += 1;
                }
            }
        }
    }
}

impl Agent<'_> {
    /// Runs round `round` (in an elastic job, the newest open round from `round` on): meets
    /// the others, starts this node's workers, watches them and the other nodes, and on a
    /// failure stops them and reports. Returns the round it ran and how it ended.
    fn run_round(&self, round: u32) -> anyhow::Result<(u32, End)> {
        let Some(plan) = self.job.plan(&self.coord, round)? else {
            return Ok((round, End::Signal(signals::take().unwrap_or(libc::SIGTERM))));
        };
        let ran = plan.round;
        let end = Round::start(&self.job, &self.coord, plan)?.run()?;
        Ok((ran, end))
    }
}

impl Drop for Agent<'_> {
    /// Gives back what the rendezvous took (a node rank taken on arrival; under etcd, this
    /// agent's count, the last one out removing the job's keys) through the control handle,
    /// so that an agent whose job failed does not wait out the rendezvous timeout on its way
    /// out; nothing is asked of a store that was lost.
    fn drop(&mut self) {
        self.job.rdzv.leave(self.coord.store());
    }
}

/// The interface that holds `--local-addr` (an address or a name resolving to one), for the
/// workers' `PHALANX_SOCKET_IFNAME`.
fn interface_of(addr: &str) -> Result<String, Error> {
    use std::net::ToSocketAddrs;
    let bad = |reason: String| Error::BadFlag {
        flag: "--local-addr",
        reason,
    };
    let ips: Vec<std::net::IpAddr> = (addr, 0)
        .to_socket_addrs()
        .map_err(|e| bad(format!("{addr:?} does not resolve: {e}")))?
        .map(|a| a.ip())
        .collect();
    let ifaces = if_addrs::get_if_addrs().unwrap_or_default();
    ifaces
        .iter()
        .find(|i| ips.contains(&i.ip()))
        .map(|i| i.name.clone())
        .ok_or_else(|| {
            let held: Vec<String> = ifaces
                .iter()
                .map(|i| format!("{} {}", i.name, i.ip()))
                .collect();
            bad(format!(
                "{addr:?} ({ips:?}) is not an address of this machine (its interfaces: {})",
                held.join(", ")
            ))
        })
}
