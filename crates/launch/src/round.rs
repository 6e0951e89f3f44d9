//! One round (attempt) of the worker group: rendezvous, start the local workers, watch them
//! and the other nodes, stop everything on the first failure, report.

use std::fs::File;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use std::cell::Cell;
use std::ffi::OsString;
use std::sync::Arc;

use phalanx_store::Store;

use crate::cause::first_failure;
use crate::elastic::admission::Nodes;
use crate::elastic::coordinate::{BarrierEnd, Coordinator, Polled};
use crate::elastic::policy::record_change;
use crate::elastic::{Membership, Rules};
use crate::output::{Console, Sink};
use crate::program::runs_python;
use crate::rdzv::claims::{rendezvous, Claim};
use crate::rdzv::Rendezvous;
use crate::report::Reporter;
use crate::signals;
use crate::summary::RootCause;
use crate::worker::{record, Exit, Exited, Spec, Worker};
use crate::worker_env::{substitute_args, worker_env, JobEnv, Layout};
use crate::{Error, LaunchArgs};

/// The exit code of a worker that stopped on SIGTERM at a step boundary (`phalanx train`'s,
/// as a shell reports a process ended by the signal: 128 + 15).
const STOPPED_BY_SIGTERM: u8 = 128 + libc::SIGTERM as u8;

/// How a round ended.
pub(crate) enum End {
    /// Every worker of every node exited 0.
    Success,
    /// The agent received this signal and stopped its workers.
    Signal(i32),
    /// A worker failed (here or on another node), or another node stopped the job.
    Failed(RootCause),
    /// Elastic jobs: a node waits to join, so the round ended for a new one (Note [Elastic
    /// rounds] in `elastic/mod.rs`); not a failure.
    Rejoin,
}

/// What the monitor loop saw first.
enum Watch {
    AllSucceeded,
    Local(u32),
    /// A local worker stopped (SIGSTOP) for this long: Note [Stopped workers].
    Stopped(u32, Duration),
    Remote(RootCause),
    Signal(i32),
    /// Elastic jobs: a node waits to join the next round.
    Rejoin,
}

/// How long the agent waits for workers to die after SIGKILL (they cannot refuse it).
const KILL_WAIT: Duration = Duration::from_secs(2);
/// How long the other workers of a failed round get to fail and exit on their own before
/// they are signalled.
const SETTLE_WAIT: Duration = Duration::from_millis(250);
/// How long the agent waits for output pipes to drain after its workers ended.
const DRAIN_WAIT: Duration = Duration::from_millis(300);

/// What every round of this node's job starts from: the flags, the program, and the identity
/// and store that the agent set up once.
pub(crate) struct Job<'a> {
    /// The flags, as given (Note [A launch plan resolved once] in `agent.rs`).
    pub(crate) args: &'a LaunchArgs,
    /// This node's rank: `--node-rank`, or the one it took on arrival (`c10d`, `etcd`).
    pub(crate) node_rank: u32,
    /// How rounds are formed, what they admit and go on without (`elastic/policy.rs`).
    pub(crate) rules: Rules,
    pub(crate) program: &'a [OsString],
    /// What the nodes compare to agree that they run the same program.
    pub(crate) signature: String,
    pub(crate) run_id: String,
    /// The job's secret, hex, handed to the workers.
    pub(crate) token_hex: String,
    /// How the agents met (`rdzv/`): who hosts the store, where each round's PyTorch store
    /// is, what to give back at the end.
    pub(crate) rdzv: Box<dyn Rendezvous>,
    /// This machine's host name, in rendezvous claims.
    pub(crate) host: String,
    /// Identifies this agent in rendezvous claims.
    pub(crate) nonce: String,
    /// The interface of `--local-addr`, for the workers' mesh.
    pub(crate) local_ifname: Option<String>,
    /// Set OMP_NUM_THREADS=1 in the workers (it was unset and nproc > 1).
    pub(crate) set_omp: bool,
    /// The agent's handle on the store for the rendezvous, bounded by PHALANX_TIMEOUT.
    pub(crate) store: Arc<dyn Store>,
    /// `--rdzv-backend etcd`: how the workers reach the job's store in etcd.
    pub(crate) etcd: Option<phalanx_store::EtcdOptions>,
    /// PHALANX_TIMEOUT.
    pub(crate) timeout: Duration,
    /// Restarts used of `--max-restarts`: the group's restarts and, under
    /// `--fault-tolerance`, single replacements.
    pub(crate) restarts_used: Cell<u32>,
}

impl Job<'_> {
    /// Runs round `round` (in an elastic job, the newest open round from `round` on):
    /// rendezvous, start this node's workers, watch them and the other nodes, and on a failure
    /// stop them and report. Returns the round it ran and how it ended.
    pub(crate) fn run_round(&self, coord: &Coordinator, round: u32) -> anyhow::Result<(u32, End)> {
        let Some(Membership {
            round,
            layout,
            members,
            admitted,
        }) = self.layout(round)?
        else {
            return Ok((round, End::Signal(signals::take().unwrap_or(libc::SIGTERM))));
        };
        if let Some(a) = admitted {
            eprintln!(
                "phalanx launch: round {round}: admitted into the running round (nodes {:?}); \
                 this node's ranks {}..{} join the running ones",
                a.live,
                layout.base_rank,
                layout.base_rank + layout.local_world_size
            );
            let master = self.master(&a.live)?;
            coord.set_members(a.live);
            let nodes = Nodes::new(round, a.nodes, a.admissions);
            let end = self.run_layout(coord, round, &layout, nodes, Some(a.first_world), master)?;
            return Ok((round, end));
        }
        if self.args.dynamic_rounds() {
            eprintln!(
                "phalanx launch: round {round}: nodes {members:?} ({} workers; this node is \
                 group rank {})",
                layout.world_size, layout.group_rank
            );
        }
        if self.args.nnodes.max > 1 {
            crate::rdzv::claims::warn_other_programs(
                &*self.store,
                round,
                &members,
                self.node_rank,
                &self.claim(),
            );
        }
        let master = self.master(&members)?;
        coord.set_members(members.clone());
        let nodes = members.iter().copied().zip(layout.sizes.iter().copied());
        let nodes = Nodes::new(round, nodes.collect(), 0);
        let end = self.run_layout(coord, round, &layout, nodes, None, master)?;
        Ok((round, end))
    }

    /// `MASTER_ADDR`/`MASTER_PORT` for a round of `members`: the store's host, or under etcd
    /// the address the round's first node published (`rdzv/etcd.rs`).
    fn master(&self, members: &[u32]) -> Result<(String, u16), Error> {
        self.rdzv.master(&*self.store, members)
    }

    fn run_layout(
        &self,
        coord: &Coordinator,
        round: u32,
        layout: &Layout,
        mut nodes: Nodes,
        joined: Option<u32>,
        master: (String, u16),
    ) -> anyhow::Result<End> {
        if self.args.fault_tolerance && runs_python(self.program) && round == 0 {
            eprintln!(
                "phalanx launch: note: --fault-tolerance needs a program that re-forms its \
                 process group: a Python program does through phalanx_torch.ft.Manager; one \
                 that does not has its failures restart the group as without it \
                 (--max-restarts)"
            );
        }
        let layout = layout.clone();
        // Beats until this round ends (Note [Agent heartbeats]); alone in an elastic round
        // too, where a node may be admitted.
        let _heartbeat = coord.heartbeat(round, self.rules.fault_tolerance);
        let attempt_dir = self
            .args
            .log_dir
            .as_ref()
            .map(|d| d.join(&self.run_id).join(format!("attempt_{round}")));
        let job = JobEnv {
            run_id: self.run_id.clone(),
            master_addr: master.0,
            master_port: master.1,
            token_hex: self.token_hex.clone(),
            round,
            max_restarts: self.args.max_restarts,
            set_omp: self.set_omp,
            attempt_dir: attempt_dir.clone(),
            fault_tolerance: self.args.fault_tolerance,
            // An admitted node's workers take their state from the running ones.
            replacement: joined.is_some(),
            first_world: joined.unwrap_or(layout.world_size),
            role: self.args.role.clone(),
            local_ifname: self.local_ifname.clone(),
            etcd: self.etcd.clone(),
        };
        // The sender stays alive here so that `recv_timeout` never reports disconnection.
        let (tx, rx) = mpsc::channel::<Exited>();
        let mut workers: Vec<Worker> = Vec::with_capacity(layout.local_world_size as usize);
        let start = Instant::now();
        for lr in 0..layout.local_world_size {
            let spec = match self.spec(&job, &layout, lr, attempt_dir.as_ref()) {
                Ok(s) => s,
                Err(e) => {
                    self.stop(&mut workers, &rx, libc::SIGKILL);
                    return Err(e.into());
                }
            };
            match Worker::spawn(spec, &tx) {
                Ok(w) => workers.push(w),
                Err(e) => {
                    self.stop(&mut workers, &rx, libc::SIGKILL);
                    return Err(e.into());
                }
            }
        }
        let mut retired = Vec::new();
        let watch = loop {
            match self.monitor(coord, round, &mut nodes, &mut workers, (&tx, &rx)) {
                Watch::Local(lr) => {
                    let replaced =
                        self.replace(&job, &layout, round, &workers[lr as usize], start, &tx);
                    // A replacement that could not start ends the round: the others are
                    // stopped here, not left to the parent-death signal when the agent exits.
                    let replaced = match replaced {
                        Ok(r) => r,
                        Err(e) => {
                            self.stop(&mut workers, &rx, libc::SIGTERM);
                            drain(&mut retired);
                            return Err(e);
                        }
                    };
                    match replaced {
                        Some(new) => {
                            retired.push(std::mem::replace(&mut workers[lr as usize], new))
                        }
                        None => break Watch::Local(lr),
                    }
                }
                other => break other,
            }
        };
        // The replaced workers' last output.
        drain(&mut retired);
        let end = match watch {
            Watch::AllSucceeded => {
                drain(&mut workers);
                match coord.exit_barrier(round) {
                    None => return Ok(End::Success),
                    Some(BarrierEnd::Signal(sig)) => return Ok(End::Signal(sig)),
                    Some(BarrierEnd::Remote(cause)) => cause,
                }
            }
            Watch::Signal(sig) => {
                let cause = RootCause {
                    what: format!("its agent received {}", signals::signal_name(sig)),
                    after_s: start.elapsed().as_secs_f64(),
                    ..coord.agent_cause(128 + sig as u8, false)
                };
                coord.publish(round, cause);
                eprintln!(
                    "phalanx launch: received {}; forwarding it to {} worker(s)",
                    signals::signal_name(sig),
                    workers.iter().filter(|w| w.exit.is_none()).count()
                );
                self.stop(&mut workers, &rx, sig);
                return Ok(End::Signal(sig));
            }
            Watch::Local(lr)
                if workers[lr as usize]
                    .exit
                    .is_some_and(|(exit, _)| exit.shell_code() == STOPPED_BY_SIGTERM)
                    && coord.node_waiting(round) =>
            {
                // Another agent saw the waiting node first and stopped its workers; theirs
                // agreed with every rank to stop after the same step (Note [Stop agreement] in
                // phalanx-train), so this one exited as a stopped run does before this agent's
                // own tick saw the node. The round ends for the node, not for a failure: no
                // restart is spent (seen in netns_elastic.rs on a loaded machine).
                eprintln!(
                    "phalanx launch: a node waits to join: round {round} was ended for a new \
                     rendezvous by another node; the workers restart from the job's newest \
                     checkpoint"
                );
                self.stop(&mut workers, &rx, libc::SIGTERM);
                return Ok(End::Rejoin);
            }
            Watch::Local(lr) => {
                let w = &workers[lr as usize];
                let (exit, at) = w.exit.expect("a failed worker has exited");
                let after = at.duration_since(start);
                let cause = RootCause {
                    what: exit.describe(),
                    code: exit.shell_code(),
                    after_s: after.as_secs_f64(),
                    startup: after < self.args.startup_window,
                    ..worker_cause(coord, w, lr)
                };
                coord.publish(round, cause)
            }
            Watch::Stopped(lr, stopped_for) => {
                let cause = RootCause {
                    what: format!(
                        "stopped (state T: SIGSTOP or job control) for {:.1} s, past \
                         PHALANX_TIMEOUT ({:.1} s)",
                        stopped_for.as_secs_f64(),
                        self.timeout.as_secs_f64()
                    ),
                    code: 1,
                    after_s: start.elapsed().as_secs_f64(),
                    ..worker_cause(coord, &workers[lr as usize], lr)
                };
                coord.publish(round, cause)
            }
            Watch::Remote(cause) => cause,
            Watch::Rejoin => {
                eprintln!(
                    "phalanx launch: a node waits to join: ending round {round} for a new \
                     rendezvous; the workers restart from the job's newest checkpoint"
                );
                self.stop(&mut workers, &rx, libc::SIGTERM);
                return Ok(End::Rejoin);
            }
        };
        // Before anything is stopped: which workers are stopped, stuck or busy.
        let seen = crate::diagnosis::snapshot(&workers);
        // The process group fails every rank at once (Note [Fail fast]): let them report the
        // root cause in their own words and exit before they are signalled.
        wait_all(&mut workers, &rx, Instant::now() + SETTLE_WAIT);
        self.stop(&mut workers, &rx, libc::SIGTERM);
        let reporter = Reporter {
            coord,
            run_id: &self.run_id,
        };
        let cause = reporter.refresh(end, &workers);
        reporter.report(round, &cause, &workers, &seen);
        Ok(End::Failed(cause))
    }

    /// Whether a worker of round `round` said it re-forms its group itself
    /// ([`phalanx_store::keys::FT_TAKES_PART`]); an unreachable store counts as no.
    fn takes_part(&self, round: u32) -> bool {
        use phalanx_store::keys;
        let key = keys::in_round(round, keys::FT_TAKES_PART);
        self.store.check(&[&key]).unwrap_or(false)
    }

    /// `--fault-tolerance`: starts a replacement for local worker `lr`, which failed, in a new
    /// generation of the round's process group (Note [Generations] in phalanx-pg), while
    /// `--max-restarts` allows; `None` when it is not replaced and the round ends as usual.
    fn replace(
        &self,
        job: &JobEnv,
        layout: &Layout,
        round: u32,
        failed: &Worker,
        start: Instant,
        tx: &mpsc::Sender<Exited>,
    ) -> anyhow::Result<Option<Worker>> {
        let used = self.restarts_used.get();
        let k = self.args.max_restarts;
        let Some((exit, at)) = failed.exit else {
            return Ok(None);
        };
        // A rank that waited for a replacement in vain: nothing would join a new one either.
        let gave_up = exit == Exit::Code(phalanx_core::EXIT_NO_REGROUP.into());
        // A Python program re-forms its group only through phalanx_torch.ft.Manager, which
        // says so in the store: without it its other ranks fail with the dead one, and
        // replacing them one by one would only spend the restarts.
        if !self.args.fault_tolerance || gave_up || used >= k {
            return Ok(None);
        }
        if runs_python(self.program) && !self.takes_part(round) {
            return Ok(None);
        }
        // Note [Generations]: the others go on without this rank in a new generation; the
        // replacement adds itself to a later one once it is ready.
        let generation = record_change(&*self.store, round, &format!("-{}", failed.rank))?;
        self.restarts_used.set(used + 1);
        eprintln!(
            "phalanx launch: rank {} (local rank {}, pid {}) ended with {} after {:.1} s; \
             --fault-tolerance: the other ranks go on without it (process-group generation \
             {generation}) and a replacement joins them when it is ready (restart {} of \
             --max-restarts {k})",
            failed.rank,
            failed.local_rank,
            failed.pid,
            exit.describe(),
            at.duration_since(start).as_secs_f64(),
            used + 1,
        );
        let replacement = JobEnv {
            replacement: true,
            attempt_dir: job
                .attempt_dir
                .as_ref()
                .map(|d| d.join(format!("replacement_{}", used + 1))),
            ..job.clone()
        };
        let dir = replacement.attempt_dir.clone();
        let spec = self.spec(&replacement, layout, failed.local_rank, dir.as_ref())?;
        Ok(Some(Worker::spawn(spec, tx)?))
    }

    /// This agent's claim in every round's rendezvous.
    fn claim(&self) -> Claim {
        let nnodes = self.args.nnodes;
        Claim {
            nproc: self.args.nproc_per_node,
            nnodes: nnodes.max,
            min_nnodes: if self.args.dynamic_rounds() {
                nnodes.min
            } else {
                0
            },
            nonce: self.nonce.clone(),
            host: self.host.clone(),
            program: self.signature.clone(),
        }
    }

    /// This node's place in round `round` (an elastic job: the round it joined) and the node
    /// ranks in it; `None` when a signal interrupted the rendezvous.
    fn layout(&self, round: u32) -> Result<Option<Membership>, Error> {
        let nnodes = self.args.nnodes;
        let fixed = |layout, members| Membership {
            round,
            layout,
            members,
            admitted: None,
        };
        if nnodes.max == 1 {
            let layout = Layout::from_sizes(0, &[self.args.nproc_per_node]);
            return Ok(Some(fixed(layout, vec![0])));
        }
        let claim = self.claim();
        if self.args.dynamic_rounds() {
            let joined = crate::elastic::join(
                &*self.store,
                round,
                self.node_rank,
                &claim,
                &self.rules,
                &mut || signals::pending(),
            )?;
            return Ok(joined);
        }
        let layout = rendezvous(
            &*self.store,
            round,
            self.node_rank,
            &claim,
            self.timeout,
            &mut || signals::pending(),
        )?;
        Ok(layout.map(|l| fixed(l, (0..nnodes.max).collect())))
    }

    fn spec(
        &self,
        job: &JobEnv,
        layout: &Layout,
        lr: u32,
        attempt_dir: Option<&PathBuf>,
    ) -> Result<Spec<'_>, Error> {
        let rank = layout.rank(lr);
        let prefix = self.args.line_prefix(rank, lr).into_bytes();
        let shown = self.args.shows(lr);
        let teed = self.args.logged_streams(lr);
        let redirected = self.args.redirected_streams(lr);
        let dir = attempt_dir.map(|d| d.join(lr.to_string()));
        if let Some(d) = &dir {
            std::fs::create_dir_all(d).map_err(|e| Error::LogFile {
                path: d.clone(),
                reason: e.to_string(),
            })?;
        }
        let file = |name: &str, on: bool| -> Result<Option<File>, Error> {
            match (&dir, on) {
                (Some(d), true) => {
                    let path = d.join(name);
                    File::create(&path).map(Some).map_err(|e| Error::LogFile {
                        path,
                        reason: e.to_string(),
                    })
                }
                _ => Ok(None),
            }
        };
        Ok(Spec {
            program: &self.program[0],
            args: substitute_args(&self.program[1..], lr),
            env: worker_env(job, layout, lr),
            local_rank: lr,
            rank,
            stdout: Sink {
                prefix: prefix.clone(),
                console: (shown && !redirected.stdout()).then_some(Console::Stdout),
                file: file("stdout.log", teed.stdout())?,
            },
            stderr: Sink {
                prefix,
                console: (shown && !redirected.stderr()).then_some(Console::Stderr),
                file: file("stderr.log", teed.stderr())?,
            },
            error_file: dir.map(|d| d.join("error.json")),
        })
    }

    /// Waits for the first worker failure, the end of all workers, a signal, or (multi-node)
    /// another node's failure, checking signals and the store every `--monitor-interval`.
    fn monitor(
        &self,
        coord: &Coordinator,
        round: u32,
        nodes: &mut Nodes,
        workers: &mut [Worker],
        (tx, rx): (&Sender<Exited>, &Receiver<Exited>),
    ) -> Watch {
        let interval = self.args.monitor_interval;
        let mut next_poll = Instant::now() + interval;
        let mut stopped = crate::diagnosis::StoppedWatch::new(workers.len());
        loop {
            if let Some(sig) = signals::take() {
                return Watch::Signal(sig);
            }
            match rx.recv_timeout(next_poll.saturating_duration_since(Instant::now())) {
                Ok(ev) if !ev.exit.success() => {
                    // Slurm's scancel and --signal reach every process of the job: a worker
                    // that ended because of the signal this agent received too (phalanx
                    // train exits 128 + it after its checkpoint) is not the root cause; the
                    // signal is.
                    if let Some(sig) = signals::take() {
                        record(workers, ev);
                        return Watch::Signal(sig);
                    }
                    return Watch::Local(first_failure(workers, (tx, rx), ev));
                }
                Ok(ev) => {
                    record(workers, ev);
                    if workers.iter().all(|w| w.exit.is_some()) {
                        return Watch::AllSucceeded;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    unreachable!("run_round holds a sender")
                }
            }
            if Instant::now() >= next_poll {
                next_poll = Instant::now() + interval;
                self.rules
                    .admissions(coord, nodes, self.node_rank, &self.claim());
                match coord.poll(round) {
                    Polled::Quiet => {}
                    Polled::Silent(g, cause) => {
                        let (store, rdzv) = (&*self.store, &*self.rdzv);
                        let me = self.node_rank;
                        if !self
                            .rules
                            .lose(coord, store, rdzv, me, (round, nodes), g, &cause)
                        {
                            return Watch::Remote(cause);
                        }
                    }
                    Polled::Failed(cause) => return Watch::Remote(cause),
                }
                // Only a Python program can be a PyTorch worker; for anything else a refused
                // PyTorch client is a stranger, logged by the store and not the job's end
                // (else five bytes from anywhere would end any job).
                let refused = runs_python(self.program)
                    .then(|| coord.torch_refused())
                    .flatten();
                if let Some(cause) = refused {
                    return Watch::Remote(coord.publish(round, cause));
                }
                if let Some((lr, stopped_for)) = stopped.check(workers, self.timeout) {
                    return Watch::Stopped(lr, stopped_for);
                }
                if self.args.dynamic_rounds() && coord.node_waiting(round) {
                    return Watch::Rejoin;
                }
            }
        }
    }

    /// Stops every worker still running: `first` (SIGTERM, or the signal the agent received),
    /// `--grace-period`, then SIGKILL to each worker's process group (which also removes
    /// anything a worker left behind), then drains their output.
    fn stop(&self, workers: &mut [Worker], rx: &Receiver<Exited>, first: i32) {
        for w in workers.iter_mut().filter(|w| w.exit.is_none()) {
            w.signal(first);
            // A stopped worker (SIGSTOP, Ctrl-Z) would hold `first` pending for the whole
            // grace period: let it run to handle it.
            w.signal(libc::SIGCONT);
        }
        let deadline = Instant::now() + self.args.grace_period;
        wait_all(workers, rx, deadline);
        for w in workers.iter_mut() {
            w.signal(libc::SIGKILL);
        }
        wait_all(workers, rx, Instant::now() + KILL_WAIT);
        drain(workers);
    }
}

/// A root cause naming local worker `lr`, to be completed with what happened to it.
fn worker_cause(coord: &Coordinator, w: &Worker, lr: u32) -> RootCause {
    RootCause {
        group_rank: coord.node_rank,
        host: coord.host.clone(),
        rank: Some(w.rank),
        local_rank: Some(lr),
        pid: Some(w.pid),
        what: String::new(),
        code: 1,
        after_s: 0.0,
        startup: false,
        restartable: true,
        last_line: w.last_line(),
    }
}

fn wait_all(workers: &mut [Worker], rx: &Receiver<Exited>, deadline: Instant) {
    while workers.iter().any(|w| w.exit.is_none()) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        if let Ok(ev) = rx.recv_timeout(left) {
            record(workers, ev);
        }
    }
}

/// Lets the output threads reach the end of their pipes; a pipe still held open by a
/// process that left the worker's group is killed with the group, then abandoned.
fn drain(workers: &mut [Worker]) {
    let deadline = Instant::now() + DRAIN_WAIT;
    let mut stuck = false;
    for w in workers.iter_mut() {
        stuck |= !(w.stdout.finish_by(deadline) & w.stderr.finish_by(deadline));
    }
    if stuck {
        for w in workers.iter_mut() {
            w.signal(libc::SIGKILL);
        }
        let deadline = Instant::now() + DRAIN_WAIT;
        for w in workers.iter_mut() {
            w.stdout.finish_by(deadline);
            w.stderr.finish_by(deadline);
        }
    }
}
