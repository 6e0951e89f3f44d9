//! One round (attempt) of this node's workers, as a value that owns them ([`Round`]): start
//! them, watch them and the other nodes, replace a failed one under `--fault-tolerance`, stop
//! them all on the first failure, report. The round's plan (rendezvous, members) is the job's
//! (`job.rs`); the loop over rounds is the agent's.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::cause::first_failure;
use crate::elastic::admission::Nodes;
use crate::elastic::coordinate::{BarrierEnd, Coordinator, Heartbeat, Polled};
use crate::elastic::policy::{record_change, record_departures};
use crate::job::{Job, Plan};
use crate::program::runs_python;
use crate::report::Reporter;
use crate::signals;
use crate::summary::RootCause;
use crate::worker::{record, Exit, Exited, Worker};
use crate::worker_env::{JobEnv, Layout};

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

/// One round of this node's workers.
pub(crate) struct Round<'j> {
    job: &'j Job<'j>,
    coord: &'j Coordinator,
    /// The round's number.
    number: u32,
    /// This node's ranks in it.
    layout: Layout,
    /// The nodes in it and their ranks, as nodes are admitted and lost.
    nodes: Nodes,
    /// What its workers are started with.
    env: JobEnv,
    /// One per local rank: the first ones, or their replacements.
    workers: Vec<Worker>,
    /// Workers replaced under `--fault-tolerance`, whose last output is drained at the end.
    retired: Vec<Worker>,
    /// The workers' exits.
    tx: Sender<Exited>,
    rx: Receiver<Exited>,
    /// When its workers started.
    start: Instant,
    /// This agent's heartbeat while the round runs (Note [Agent heartbeats]).
    _heartbeat: Heartbeat,
}

impl<'j> Round<'j> {
    /// Starts this node's workers for `plan` and its heartbeat; on a worker that cannot
    /// start, stops the ones started and fails.
    pub(crate) fn start(
        job: &'j Job<'j>,
        coord: &'j Coordinator,
        plan: Plan,
    ) -> anyhow::Result<Round<'j>> {
        let Plan {
            round,
            layout,
            nodes,
            joined,
            master,
        } = plan;
        if job.args.fault_tolerance && runs_python(job.program) && round == 0 {
            eprintln!(
                "phalanx launch: note: --fault-tolerance needs a program that re-forms its \
                 process group: a Python program does through phalanx_torch.ft.Manager; one \
                 that does not has its failures restart the group as without it \
                 (--max-restarts)"
            );
        }
        // Beats until this round ends (Note [Agent heartbeats]); alone in an elastic round
        // too, where a node may be admitted.
        let heartbeat = coord.heartbeat(round, job.rules.fault_tolerance);
        let attempt_dir = job
            .args
            .log_dir
            .as_ref()
            .map(|d| d.join(&job.run_id).join(format!("attempt_{round}")));
        let env = JobEnv {
            run_id: job.run_id.clone(),
            master_addr: master.0,
            master_port: master.1,
            token_hex: job.token_hex.clone(),
            round,
            max_restarts: job.args.max_restarts,
            set_omp: job.set_omp,
            attempt_dir,
            fault_tolerance: job.args.fault_tolerance,
            // An admitted node's workers take their state from the running ones.
            replacement: joined.is_some(),
            first_world: joined.unwrap_or(layout.world_size),
            role: job.args.role.clone(),
            local_ifname: job.local_ifname.clone(),
            etcd: job.etcd.clone(),
        };
        // The sender stays alive here so that `recv_timeout` never reports disconnection.
        let (tx, rx) = mpsc::channel::<Exited>();
        let mut r = Round {
            job,
            coord,
            number: round,
            workers: Vec::with_capacity(layout.local_world_size as usize),
            layout,
            nodes,
            env,
            retired: Vec::new(),
            tx,
            rx,
            start: Instant::now(),
            _heartbeat: heartbeat,
        };
        for lr in 0..r.layout.local_world_size {
            let dir = r.env.attempt_dir.clone();
            let spawned = job
                .spec(&r.env, &r.layout, lr, dir.as_ref())
                .map_err(anyhow::Error::from)
                .and_then(|spec| Ok(Worker::spawn(spec, &r.tx)?));
            match spawned {
                Ok(w) => r.workers.push(w),
                Err(e) => {
                    r.stop(libc::SIGKILL);
                    return Err(e);
                }
            }
        }
        Ok(r)
    }

    /// Watches the round to its end: every worker done (then the exit barrier), a signal, a
    /// failure here or on another node (replaced under `--fault-tolerance` while restarts
    /// last), or a node waiting to join; stops the workers and reports as that end asks.
    pub(crate) fn run(mut self) -> anyhow::Result<End> {
        let watch = loop {
            match self.watch() {
                Watch::Local(lr) => match self.replace(lr) {
                    Ok(true) => {}
                    Ok(false) => break Watch::Local(lr),
                    // A replacement that could not start ends the round: the others are
                    // stopped here, not left to the parent-death signal when the agent exits.
                    Err(e) => {
                        self.stop(libc::SIGTERM);
                        drain(&mut self.retired);
                        return Err(e);
                    }
                },
                other => break other,
            }
        };
        // The replaced workers' last output.
        drain(&mut self.retired);
        self.end(watch)
    }

    /// Ends the round as `watch` says: a success passes the exit barrier; anything else
    /// stops the workers, and a failure is published and reported.
    fn end(mut self, watch: Watch) -> anyhow::Result<End> {
        let (coord, round, start) = (self.coord, self.number, self.start);
        let end = match watch {
            Watch::AllSucceeded => {
                drain(&mut self.workers);
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
                    self.workers.iter().filter(|w| w.exit.is_none()).count()
                );
                self.stop(sig);
                return Ok(End::Signal(sig));
            }
            Watch::Local(lr)
                if self.workers[lr as usize]
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
                self.stop(libc::SIGTERM);
                return Ok(End::Rejoin);
            }
            Watch::Local(lr) => {
                let w = &self.workers[lr as usize];
                let (exit, at) = w.exit.expect("a failed worker has exited");
                let after = at.duration_since(start);
                let cause = RootCause {
                    what: exit.describe(),
                    code: exit.shell_code(),
                    after_s: after.as_secs_f64(),
                    startup: after < self.job.args.startup_window,
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
                        self.job.timeout.as_secs_f64()
                    ),
                    code: 1,
                    after_s: start.elapsed().as_secs_f64(),
                    ..worker_cause(coord, &self.workers[lr as usize], lr)
                };
                coord.publish(round, cause)
            }
            Watch::Remote(cause) => cause,
            Watch::Rejoin => {
                eprintln!(
                    "phalanx launch: a node waits to join: ending round {round} for a new \
                     rendezvous; the workers restart from the job's newest checkpoint"
                );
                self.stop(libc::SIGTERM);
                return Ok(End::Rejoin);
            }
        };
        // Before anything is stopped: which workers are stopped, stuck or busy.
        let seen = crate::diagnosis::snapshot(&self.workers);
        // The process group fails every rank at once (Note [Fail fast]): let them report the
        // root cause in their own words and exit before they are signalled.
        wait_all(&mut self.workers, &self.rx, Instant::now() + SETTLE_WAIT);
        self.stop(libc::SIGTERM);
        let reporter = Reporter {
            coord,
            run_id: &self.job.run_id,
        };
        let cause = reporter.refresh(end, &self.workers);
        reporter.report(round, &cause, &self.workers, &seen);
        Ok(End::Failed(cause))
    }

    /// `--fault-tolerance`: replaces local worker `lr`, which failed, with a new one in a new
    /// generation of the round's process group (Note [FT generations] in phalanx-pg), while
    /// `--max-restarts` allows; `false` when it is not replaced and the round ends as usual.
    fn replace(&mut self, lr: u32) -> anyhow::Result<bool> {
        let (job, round, start) = (self.job, self.number, self.start);
        let failed = &self.workers[lr as usize];
        let used = job.restarts_used.get();
        let k = job.args.max_restarts;
        let Some((exit, at)) = failed.exit else {
            return Ok(false);
        };
        // A rank that waited for a replacement in vain: nothing would join a new one either.
        let gave_up = exit == Exit::Code(phalanx_core::EXIT_NO_REGROUP.into());
        // A Python program re-forms its group only through phalanx_torch.ft.Manager, which
        // says so in the store: without it its other ranks fail with the dead one, and
        // replacing them one by one would only spend the restarts.
        if !job.args.fault_tolerance || gave_up || used >= k {
            return Ok(false);
        }
        if runs_python(job.program) && !job.takes_part(round) {
            return Ok(false);
        }
        // Note [FT generations]: the others go on without this rank in a new generation; the
        // replacement adds itself to a later one once it is ready.
        let generation = record_change(&*job.store, round, &format!("-{}", failed.rank))?;
        job.restarts_used.set(used + 1);
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
            attempt_dir: self
                .env
                .attempt_dir
                .as_ref()
                .map(|d| d.join(format!("replacement_{}", used + 1))),
            ..self.env.clone()
        };
        let dir = replacement.attempt_dir.clone();
        let spec = job.spec(&replacement, &self.layout, lr, dir.as_ref())?;
        let new = Worker::spawn(spec, &self.tx)?;
        self.retired
            .push(std::mem::replace(&mut self.workers[lr as usize], new));
        Ok(true)
    }

    /// Waits for the first worker failure, the end of all workers, a signal, or (multi-node)
    /// another node's failure, checking signals and the store every `--monitor-interval`.
    fn watch(&mut self) -> Watch {
        let (job, coord, round) = (self.job, self.coord, self.number);
        let (workers, nodes) = (&mut self.workers, &mut self.nodes);
        let (tx, rx) = (&self.tx, &self.rx);
        let interval = job.args.monitor_interval;
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
                    unreachable!("the round holds a sender")
                }
            }
            if Instant::now() >= next_poll {
                next_poll = Instant::now() + interval;
                // A lost node first (a closed link costs no store read), then arrivals.
                match coord.poll(round) {
                    // A departure whose claim or record found no answer (an election) is
                    // tried again, on a tick that lost nobody new.
                    Polled::Quiet => {
                        if coord.answers() {
                            record_departures(coord, &*job.store, round);
                        }
                    }
                    Polled::Silent(g, cause) => {
                        let (store, rdzv) = (&*job.store, &*job.rdzv);
                        let me = job.node_rank;
                        if !job
                            .rules
                            .lose(coord, store, rdzv, me, (round, nodes), g, &cause)
                        {
                            return Watch::Remote(cause);
                        }
                    }
                    Polled::Failed(cause) => return Watch::Remote(cause),
                }
                job.rules
                    .admissions(coord, nodes, job.node_rank, &job.claim());
                // Only a Python program can be a PyTorch worker; for anything else a refused
                // PyTorch client is a stranger, logged by the store and not the job's end
                // (else five bytes from anywhere would end any job).
                let refused = runs_python(job.program)
                    .then(|| coord.torch_refused())
                    .flatten();
                if let Some(cause) = refused {
                    return Watch::Remote(coord.publish(round, cause));
                }
                if let Some((lr, stopped_for)) = stopped.check(workers, job.timeout) {
                    return Watch::Stopped(lr, stopped_for);
                }
                if job.args.dynamic_rounds() && coord.node_waiting(round) {
                    return Watch::Rejoin;
                }
            }
        }
    }

    /// Stops every worker still running: `first` (SIGTERM, or the signal the agent received),
    /// `--grace-period`, then SIGKILL to each worker's process group (which also removes
    /// anything a worker left behind), then drains their output.
    fn stop(&mut self, first: i32) {
        let (workers, rx) = (&mut self.workers, &self.rx);
        for w in workers.iter_mut().filter(|w| w.exit.is_none()) {
            w.signal(first);
            // A stopped worker (SIGSTOP, Ctrl-Z) would hold `first` pending for the whole
            // grace period: let it run to handle it.
            w.signal(libc::SIGCONT);
        }
        let deadline = Instant::now() + self.job.args.grace_period;
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
