//! Multi-node coordination through the store: publishing a round's root cause (first writer
//! wins), polling for the other nodes' failures and heartbeats, the exit barrier that keeps
//! node 0's store up until every node is done, and the reads and row exchange of the failure
//! report.
//!
//! Note [Agent heartbeats]: during a round every agent adds 1 to its store counter
//! `agent/<round>/heartbeat/<node>` every [`HEARTBEAT_INTERVAL`], and every agent reads the
//! others' counters at that pace, all in one `multi_get` (so a job of N nodes costs the store
//! O(N) requests a beat, not O(N²)). A counter that has not moved for [`HEARTBEAT_TIMEOUT`] (by
//! the reader's own clock, so clocks need not agree) means that node's agent is gone (SIGKILLed,
//! stopped, its host off the network) even when its workers were idle and no collective would
//! have failed: the round ends naming the node and when it was last heard of. Counters, not
//! timestamps, so skewed clocks between hosts do not matter. Under etcd each agent's counter
//! is attached to its lease (Note [etcd leases] in phalanx-store), as its node rank and master
//! address are: when the agent's keep-alives stop, etcd deletes them, and a counter found back
//! at 0 names the node at once.
//!
//! [`Coordinator`] owns the agent's control handle on the store and whether the store is lost,
//! so that once node 0 is gone no caller retries it.
//!
//! Note [An election is not a lost store]: a store that an agent hosts (`static`, `c10d`) and
//! that stops answering means that agent is gone, and the job with it. An etcd cluster stops
//! answering for a while whenever its leader is lost: until the others notice (etcd's
//! `--election-timeout`, 1 s by default) and elect a new one, which may take a second
//! election when votes split. So one member lost, the leader included, must not end the job:
//! under etcd the store counts as lost only after it has not answered for the backend's
//! `Rendezvous::store_grace` (`--rdzv-conf quorum_timeout`, 5 s by default: several election
//! timeouts), while the agent keeps watching its links. A quorum lost for good is still told
//! within seconds, and workers that finish their job meanwhile end it as usual.
//!
//! Note [The monitor does not wait out an election]: the monitor reads links first, then the
//! store, in one thread. When node 0's host goes with the etcd leader on it, a read sent just
//! before the kill waits for the next leader (about a second), and the closed link that
//! would have named node 0 at once waits behind it: the survivors' next step came 1.1 s after
//! the kill instead of 0.1–0.4 s. So under etcd the monitor reads through a handle bounded
//! by about one poll (`Met::watch`): an unanswered read counts towards the store's grace and
//! the next poll looks at the links again. Writes that others depend on (a lost node's ranks
//! leaving the process group, a published failure, the exit barrier) go through the control
//! handle, which under etcd waits out an election (the store's grace) rather than failing in
//! it: when both survivors' claims to record node 0's departure failed after 1 s, nobody
//! recorded it, and their workers waited 30 s for a replacement. An election can outlast
//! that grace too (seen once: 5 s): a claim or record that still finds no answer stays owed
//! and is tried again on a later tick (Note [A departure is recorded once] in `policy.rs`).

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use phalanx_store::{keys, Store};

use super::departures::{Departures, Owed};
use super::links::Links;
use crate::rdzv::claims::Claim;
use crate::signals;
use crate::summary::{RootCause, Row};

/// What the exit barrier ended in, when not plain success.
pub(crate) enum BarrierEnd {
    Signal(i32),
    Remote(RootCause),
}

/// How long node 0 keeps its store up for the other agents to read the barrier's end.
const LEAVE_WAIT: Duration = Duration::from_secs(5);
/// How long an agent waits for the other nodes' report rows before printing without them.
const ROWS_WAIT: Duration = Duration::from_secs(1);
/// How often an agent beats and reads the others' beats (Note [Agent heartbeats]).
pub(crate) const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);
/// How long a silent agent is given before its node is declared gone.
pub(crate) const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);

/// What [`Coordinator::poll`] saw of the other nodes.
pub(crate) enum Polled {
    /// Nothing: the round goes on.
    Quiet,
    /// A failure another node published (or the store is gone): the round ends.
    Failed(RootCause),
    /// Node `.0` stopped its heartbeat.
    Silent(u32, RootCause),
}

/// This node's side of the conversation between agents.
pub(crate) struct Coordinator {
    /// The control handle on the store, whose calls (reconnection included) give up after
    /// `CONTROL_TIMEOUT`: a node 0 that is gone must not stall a failing agent for
    /// PHALANX_TIMEOUT.
    ctl: Arc<dyn Store>,
    /// The store stopped answering (node 0 gone): no more store calls, which would each
    /// retry.
    lost: Cell<bool>,
    /// `--nnodes` (MAX of an elastic range): node ranks are below it.
    nnodes: u32,
    /// The node ranks in the current round: all of them in a static job, the round's members
    /// in an elastic one (Note [Elastic rounds] in `elastic/mod.rs`).
    members: RefCell<Vec<u32>>,
    /// `--node-rank`.
    pub(crate) node_rank: u32,
    /// This machine's host name, for root causes and report rows.
    pub(crate) host: String,
    /// PHALANX_TIMEOUT: the exit barrier's bound.
    timeout: Duration,
    /// `--monitor-interval`: how often the exit barrier polls.
    poll: Duration,
    /// The other nodes' heartbeat counters: (round, per node: last value and when it moved),
    /// and when they were last read.
    beats: RefCell<Beats>,
    /// Links to the other agents, which tell at once that one's process ended (Note [Agent
    /// links]); under `--rdzv-backend etcd` only.
    links: Option<Links>,
    /// The other nodes' hosts, read while the store answers, for naming a lost node at once.
    hosts: RefCell<std::collections::BTreeMap<u32, String>>,
    /// How long the store may go unanswered before it counts as lost (Note [An election is
    /// not a lost store]); zero for a store an agent hosts.
    grace: Duration,
    /// Since when the store has not answered this agent's polls, while it has not.
    unanswered: Cell<Option<Instant>>,
    /// Where this agent's heartbeat is written: a handle whose keys expire with the agent
    /// under etcd (Note [etcd leases] in phalanx-store), else `ctl`.
    beat: Arc<dyn Store>,
    /// The monitor's reads (failures, heartbeats, links, waiting nodes): a handle bounded by
    /// about one poll under etcd (Note [The monitor does not wait out an election]), else
    /// `ctl`.
    watch: Arc<dyn Store>,
    /// Lost nodes whose ranks' departure this agent owes the generation log (Note [A
    /// departure is recorded once] in `policy.rs`).
    departures: Departures,
}

/// What this agent knows of the others' heartbeats in one round.
#[derive(Default)]
struct Beats {
    round: Option<u32>,
    seen: Vec<(i64, Option<Instant>)>,
    read_at: Option<Instant>,
}

/// This agent's heartbeat for one round; dropping it stops the beating.
pub(crate) struct Heartbeat {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Coordinator {
    pub(crate) fn new(
        ctl: Arc<dyn Store>,
        nnodes: u32,
        node_rank: u32,
        host: String,
        timeout: Duration,
        poll: Duration,
    ) -> Self {
        Coordinator {
            beat: ctl.clone(),
            watch: ctl.clone(),
            ctl,
            lost: Cell::new(false),
            nnodes,
            members: RefCell::new((0..nnodes).collect()),
            node_rank,
            host,
            timeout,
            poll,
            beats: RefCell::new(Beats::default()),
            links: None,
            hosts: RefCell::default(),
            grace: Duration::ZERO,
            unanswered: Cell::new(None),
            departures: Departures::default(),
        }
    }

    /// Writes this agent's heartbeat through `beat`, whose keys expire with the agent.
    pub(crate) fn with_beat(mut self, beat: Arc<dyn Store>) -> Self {
        self.beat = beat;
        self
    }

    /// Reads what the monitor watches through `watch`, a handle whose calls give up after
    /// about one poll (Note [The monitor does not wait out an election]).
    pub(crate) fn with_watch(mut self, watch: Arc<dyn Store>) -> Self {
        self.watch = watch;
        self
    }

    /// Lets the store go unanswered for `grace` before it counts as lost (Note [An election
    /// is not a lost store]).
    pub(crate) fn with_store_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Watches the other agents through links as well as heartbeats (Note [Agent links]).
    pub(crate) fn with_links(mut self, links: Links) -> Self {
        self.links = Some(links);
        self
    }

    /// Node `g`'s host, from the claim it made in round `round`'s rendezvous.
    fn host_of(&self, round: u32, g: u32) -> String {
        let claim = keys::agent(round, &format!("node/{g}"));
        self.ctl
            .get(&claim)
            .ok()
            .and_then(|c| serde_json::from_slice::<Claim>(&c).ok())
            .map_or_else(|| "?".to_string(), |c| c.host)
    }

    /// Sets the node ranks of the round about to run (elastic rounds).
    pub(crate) fn set_members(&self, members: Vec<u32>) {
        *self.members.borrow_mut() = members;
    }

    /// The nodes of the current round other than this one.
    fn others(&self) -> Vec<u32> {
        let me = self.node_rank;
        self.members
            .borrow()
            .iter()
            .copied()
            .filter(|&g| g != me)
            .collect()
    }

    /// Elastic jobs: whether a node waits to join the round after `round` (scale up: Note
    /// [Elastic rounds]). Checked by every agent, even one alone in its round.
    pub(crate) fn node_waiting(&self, round: u32) -> bool {
        !self.lost.get()
            && self.answers()
            && crate::rdzv::claims::someone_waiting(&*self.watch, round + 1)
    }

    /// Starts this node's heartbeat for round `round` (nothing with one node, unless
    /// `always`: a node may be admitted into the round, Note [Node admission]).
    pub(crate) fn heartbeat(&self, round: u32, always: bool) -> Heartbeat {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = (always || self.has_peers()).then(|| {
            let (stop, ctl, grace) = (stop.clone(), self.beat.clone(), self.grace);
            let key = keys::agent(round, &format!("heartbeat/{}", self.node_rank));
            std::thread::Builder::new()
                .name("phalanx-heartbeat".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        // A store that stopped answering is the monitor's to report. One that
                        // may come back (an etcd election: Note [An election is not a lost
                        // store]) is beaten again at the next interval, or this node would
                        // fall silent for good over a second's election.
                        if ctl.add(&key, 1).is_err() && grace.is_zero() {
                            return;
                        }
                        let until = Instant::now() + HEARTBEAT_INTERVAL;
                        while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                })
                .expect("spawning the heartbeat thread")
        });
        Heartbeat { stop, thread }
    }

    /// A node whose heartbeat stopped (Note [Agent heartbeats]); read at most every
    /// [`HEARTBEAT_INTERVAL`].
    fn silent_node(&self, round: u32) -> Option<RootCause> {
        let now = Instant::now();
        let mut b = self.beats.borrow_mut();
        if b.round != Some(round) {
            *b = Beats {
                round: Some(round),
                seen: vec![(0, None); self.nnodes as usize],
                read_at: None,
            };
        }
        let others = self.others();
        if b.read_at
            .is_some_and(|t| now.duration_since(t) < HEARTBEAT_INTERVAL)
        {
            return None;
        }
        b.read_at = Some(now);
        if let Some(links) = &self.links {
            if !links.watch(&*self.watch, &others) {
                return None;
            }
            for &g in &others {
                if !self.hosts.borrow().contains_key(&g) {
                    let host = self.host_of(round, g);
                    self.hosts.borrow_mut().insert(g, host);
                }
            }
        }
        let counts = self.heartbeat_counts(round, &others)?;
        for (&g, count) in others.iter().zip(counts) {
            let (last, moved) = &mut b.seen[g as usize];
            // A counter only grows: one back at 0 was deleted, its agent's lease expired
            // (Note [etcd leases] in phalanx-store), and reading it wrote it again.
            if count == 0 && *last > 0 {
                return Some(RootCause {
                    group_rank: g,
                    host: self.host_of(round, g),
                    what: format!(
                        "its agent's etcd lease expired: it sent no keep-alive for the lease's \
                         time to live (last heartbeat seen {:.1} s ago; the agent was killed \
                         or stopped, or the host left the network)",
                        moved.map_or(0.0, |t| now.duration_since(t).as_secs_f64())
                    ),
                    ..self.agent_cause(1, true)
                });
            }
            if count != *last || moved.is_none() {
                // The first reading starts the clock: a node still starting gets its full
                // timeout from then.
                *last = count;
                *moved = Some(now);
                continue;
            }
            let silent = now.duration_since(moved.expect("set above"));
            if silent > HEARTBEAT_TIMEOUT {
                return Some(RootCause {
                    group_rank: g,
                    host: self.host_of(round, g),
                    what: format!(
                        "its agent stopped its heartbeat: last heard of {:.1} s ago (the agent \
                         was killed or stopped, or the host left the network)",
                        silent.as_secs_f64()
                    ),
                    ..self.agent_cause(1, true)
                });
            }
        }
        None
    }

    /// The heartbeat counters of nodes `nodes` in round `round`: one `multi_get` once every
    /// node has beaten (two requests per read, not one per node), a counter per node before
    /// that (a missing one reads 0). `None` when the store does not answer.
    fn heartbeat_counts(&self, round: u32, nodes: &[u32]) -> Option<Vec<i64>> {
        let keys: Vec<String> = nodes
            .iter()
            .map(|g| keys::agent(round, &format!("heartbeat/{g}")))
            .collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        if self.watch.check(&refs).ok()? {
            let values = self.watch.multi_get(&refs).ok()?;
            return Some(
                values
                    .iter()
                    .map(|v| {
                        std::str::from_utf8(v)
                            .ok()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0)
                    })
                    .collect(),
            );
        }
        refs.iter().map(|k| self.watch.add(k, 0).ok()).collect()
    }

    /// A node whose agent's link closed without a goodbye (Note [Agent links]): read before
    /// anything from the store, which may itself be electing a leader when that node's host
    /// held it.
    fn closed_link(&self) -> Option<RootCause> {
        let links = self.links.as_ref()?;
        let (g, at) = self
            .others()
            .into_iter()
            .find_map(|g| Some((g, links.closed(g)?)))?;
        Some(RootCause {
            group_rank: g,
            host: self
                .hosts
                .borrow()
                .get(&g)
                .cloned()
                .unwrap_or_else(|| "?".into()),
            what: format!(
                "its agent's link closed without a goodbye {:.2} s ago: the agent's process \
                 ended (killed, or its host's processes stopped)",
                at.elapsed().as_secs_f64()
            ),
            ..self.agent_cause(1, true)
        })
    }

    /// Whether there are other nodes to tell and hear from (more than one node, store alive).
    pub(crate) fn has_peers(&self) -> bool {
        self.members.borrow().len() > 1 && !self.lost.get()
    }

    /// Publishes `cause` as round `round`'s root cause unless another node was first; returns
    /// the root cause every agent will report.
    pub(crate) fn publish(&self, round: u32, cause: RootCause) -> RootCause {
        if !self.has_peers() {
            return cause;
        }
        let k = keys::agent(round, "failed");
        let mine = serde_json::to_vec(&cause).expect("a root cause serialises");
        match self.ctl.compare_set(&k, b"", &mine) {
            Ok(got) if got != mine => serde_json::from_slice(&got).unwrap_or(cause),
            Ok(_) => cause,
            Err(e) => {
                self.lost.set(true);
                eprintln!("phalanx launch: could not tell the other nodes about the failure: {e}");
                cause
            }
        }
    }

    /// Another node's failure in round `round`, if one was published (multi-node only). A
    /// store that stopped answering is itself a failure: node 0's agent is gone.
    pub(crate) fn poll_failed(&self, round: u32) -> Option<RootCause> {
        match self.poll(round) {
            Polled::Quiet => None,
            Polled::Failed(cause) | Polled::Silent(_, cause) => Some(cause),
        }
    }

    /// [`poll_failed`](Self::poll_failed), telling a node that went silent (which fault
    /// tolerance may leave behind) from a failure another node published.
    pub(crate) fn poll(&self, round: u32) -> Polled {
        if !self.has_peers() {
            return Polled::Quiet;
        }
        if let Some(cause) = self.closed_link() {
            return Polled::Silent(cause.group_rank, cause);
        }
        let k = keys::agent(round, "failed");
        let got = self.watch.check(&[&k]).and_then(|present| {
            if present {
                self.watch.get(&k).map(Some)
            } else {
                Ok(None)
            }
        });
        if got.is_ok() {
            if let Some(since) = self.unanswered.take() {
                eprintln!(
                    "phalanx launch: the job's store answers again after {:.1} s",
                    since.elapsed().as_secs_f64()
                );
                // Nobody could beat while the store did not answer: every node's heartbeat
                // clock starts again from the next reading.
                for seen in self.beats.borrow_mut().seen.iter_mut() {
                    seen.1 = None;
                }
            }
        }
        match got {
            Ok(None) => match self.silent_node(round) {
                Some(cause) => Polled::Silent(cause.group_rank, cause),
                None => Polled::Quiet,
            },
            Ok(Some(v)) => {
                Polled::Failed(serde_json::from_slice(&v).unwrap_or_else(|e| RootCause {
                    what: format!("another node reported a failure this agent cannot read: {e}"),
                    ..self.agent_cause(1, false)
                }))
            }
            Err(e) => {
                let since = self.unanswered.get().unwrap_or_else(Instant::now);
                if since.elapsed() < self.grace {
                    if self.unanswered.replace(Some(since)).is_none() {
                        eprintln!(
                            "phalanx launch: the job's store does not answer ({e}); waiting up \
                             to {:.0} s for it (an election, or a lost quorum)",
                            self.grace.as_secs_f64()
                        );
                    }
                    return Polled::Quiet;
                }
                self.lost.set(true);
                let silent = match self.grace.is_zero() {
                    true => String::new(),
                    false => format!("; no answer for {:.1} s", since.elapsed().as_secs_f64()),
                };
                Polled::Failed(RootCause {
                    // Links run under etcd only, where the store is etcd's, not node 0's.
                    what: match self.links {
                        Some(_) => format!("lost the job's store in etcd ({e}{silent})"),
                        None => format!("lost the store on node 0 ({e}); is node 0's agent gone?"),
                    },
                    ..self.agent_cause(1, false)
                })
            }
        }
    }

    /// `--fault-tolerance`: the round goes on without node `g` (silent: Note [Agent
    /// heartbeats]). It leaves this agent's members (heartbeats, exit barrier), and the
    /// departure of its `ranks` is owed until one agent claimed it
    /// ([`claim_departures`](Self::claim_departures)).
    pub(crate) fn drop_member(&self, round: u32, g: u32, ranks: Range<u32>) {
        self.members.borrow_mut().retain(|&m| m != g);
        if let Some(links) = &self.links {
            links.forget(g);
        }
        self.departures.owe(round, g, ranks, None);
    }

    /// Ranks of node `g` whose departure this agent claimed but could not record: owed again,
    /// to be recorded at a later tick without claiming anew; `bumped`, the generation the
    /// first of them already took, whose change key is what is left to write.
    pub(crate) fn owe_record(&self, round: u32, g: u32, ranks: Range<u32>, bumped: Option<u64>) {
        self.departures.owe(round, g, ranks, Some(bumped));
    }

    /// The departures owed in round `round` that this agent now holds the claim to, to record
    /// ([`Departures::claim`]).
    pub(crate) fn claim_departures(&self, round: u32) -> Vec<Owed> {
        self.departures.claim(&*self.ctl, self.node_rank, round)
    }

    /// `--fault-tolerance`: node `g` was admitted into round `round` (Note [Node admission]): its
    /// heartbeat is watched from now on, and it counts in the exit barrier.
    pub(crate) fn add_member(&self, round: u32, g: u32) {
        self.members.borrow_mut().push(g);
        if let Some(links) = &self.links {
            links.forget(g);
        }
        // A node rank taken again may be another host's.
        self.hosts.borrow_mut().remove(&g);
        let mut b = self.beats.borrow_mut();
        if b.round == Some(round) {
            // A node that comes back gets its full timeout from its first beat.
            if let Some(seen) = b.seen.get_mut(g as usize) {
                *seen = (0, None);
            }
        }
    }

    /// Whether node `g` is in the current round.
    pub(crate) fn is_member(&self, g: u32) -> bool {
        self.members.borrow().contains(&g)
    }

    /// The node ranks of the current round.
    pub(crate) fn members(&self) -> Vec<u32> {
        self.members.borrow().clone()
    }

    /// The node that answers arrivals, frees lost nodes' ranks and waits last at the exit
    /// barrier: the lowest node rank still in the round. That is node 0 while it lives, and
    /// node 0 outlives every round unless the store is etcd's (Note [No node is special]).
    pub(crate) fn leader(&self) -> u32 {
        self.members
            .borrow()
            .iter()
            .copied()
            .min()
            .unwrap_or(self.node_rank)
    }

    /// How many nodes the current round still has.
    pub(crate) fn member_count(&self) -> usize {
        self.members.borrow().len()
    }

    /// Node 0's agent (which hosts the store): the PyTorch client its store refused, as the
    /// job's root cause (Note [Two protocols on one port] in phalanx-store). Not restartable:
    /// a restart would be refused the same way.
    pub(crate) fn torch_refused(&self) -> Option<RootCause> {
        if self.node_rank != 0 {
            return None;
        }
        let why = match self.watch.check(&[keys::TORCH_REFUSED]) {
            Ok(true) => self.watch.get(keys::TORCH_REFUSED).ok()?,
            _ => return None,
        };
        Some(RootCause {
            what: format!(
                "its store refused a PyTorch worker's connection: {}",
                String::from_utf8_lossy(&why)
            ),
            ..self.agent_cause(1, false)
        })
    }

    /// A root cause that names this agent rather than a worker.
    pub(crate) fn agent_cause(&self, code: u8, restartable: bool) -> RootCause {
        RootCause {
            group_rank: self.node_rank,
            host: self.host.clone(),
            rank: None,
            local_rank: None,
            pid: None,
            what: String::new(),
            code,
            after_s: 0.0,
            startup: false,
            restartable,
            last_line: None,
        }
    }

    /// After this node's workers all succeeded: waits until every node's have (torchrun's
    /// exit barrier), so that node 0 keeps the store up and a late failure elsewhere can still
    /// restart this node's group. `None` means the whole job succeeded.
    pub(crate) fn exit_barrier(&self, round: u32) -> Option<BarrierEnd> {
        if !self.has_peers() {
            return None;
        }
        let nnodes = self.members.borrow().len() as i64;
        let done = keys::agent(round, "done");
        let left = keys::agent(round, "left");
        if let Err(e) = self.ctl.add(&done, 1) {
            eprintln!("phalanx launch: exit barrier: {e}; assuming the job is over");
            return None;
        }
        let start = Instant::now();
        loop {
            if let Some(sig) = signals::take() {
                return Some(BarrierEnd::Signal(sig));
            }
            if let Some(cause) = self.poll_failed(round) {
                return Some(BarrierEnd::Remote(cause));
            }
            match self.ctl.add(&done, 0) {
                Ok(n) if n >= nnodes => break,
                Ok(_) => {}
                Err(e) => {
                    eprintln!("phalanx launch: exit barrier: {e}; assuming the job is over");
                    return None;
                }
            }
            if start.elapsed() >= self.timeout {
                eprintln!(
                    "phalanx launch: exit barrier: not every node finished within {:?} \
                     (PHALANX_TIMEOUT); this node's workers all succeeded",
                    self.timeout
                );
                return None;
            }
            std::thread::sleep(self.poll);
        }
        if self.node_rank != self.leader() {
            let _ = self.ctl.add(&left, 1);
            return None;
        }
        let deadline = Instant::now() + LEAVE_WAIT;
        while Instant::now() < deadline {
            match self.ctl.add(&left, 0) {
                Ok(n) if n >= nnodes - 1 => break,
                Ok(_) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => break,
            }
        }
        None
    }

    /// The control handle on the store, unless the store is lost.
    pub(crate) fn store(&self) -> Option<&dyn Store> {
        (!self.lost.get()).then_some(&*self.ctl)
    }

    /// Whether the store answered the monitor's last poll: while it does not (an election),
    /// the rest of a tick reads nothing, so that the next poll (and the links) comes soon.
    pub(crate) fn answers(&self) -> bool {
        self.unanswered.get().is_none()
    }

    /// The monitor's handle on the store (`ctl` where no election can stall it).
    pub(crate) fn watch(&self) -> &dyn Store {
        &*self.watch
    }

    /// The value of store key `k`, if it is there and the store still answers.
    pub(crate) fn read(&self, k: &str) -> Option<Vec<u8>> {
        if self.lost.get() {
            return None;
        }
        match self.ctl.check(&[k]) {
            Ok(true) => self.ctl.get(k).ok(),
            _ => None,
        }
    }

    /// Publishes this node's rows and collects the others' (best effort, [`ROWS_WAIT`]).
    pub(crate) fn gather_rows(&self, round: u32, rows: &mut Vec<Row>, missing: &mut Vec<u32>) {
        if !self.has_peers() {
            return;
        }
        let me = self.node_rank;
        let mine = serde_json::to_vec(&rows).expect("rows serialise");
        if self
            .ctl
            .set(&keys::agent(round, &format!("rows/{me}")), &mine)
            .is_err()
        {
            return;
        }
        let mut pending = self.others();
        let deadline = Instant::now() + ROWS_WAIT;
        loop {
            pending.retain(|&g| {
                let k = keys::agent(round, &format!("rows/{g}"));
                match self.ctl.check(&[&k]) {
                    Ok(true) => {
                        if let Ok(theirs) = self
                            .ctl
                            .get(&k)
                            .map(|v| serde_json::from_slice::<Vec<Row>>(&v).unwrap_or_default())
                        {
                            rows.extend(theirs);
                        }
                        false
                    }
                    Ok(false) => true,
                    Err(_) => false,
                }
            });
            if pending.is_empty() || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        missing.extend(pending);
        // Node 0 hosts the store: it stays until the others have read its rows.
        let reported = keys::agent(round, "reported");
        if me != 0 {
            let _ = self.ctl.add(&reported, 1);
            return;
        }
        let deadline = Instant::now() + ROWS_WAIT;
        while Instant::now() < deadline {
            match self.ctl.add(&reported, 0) {
                Ok(n) if n + 1 < self.members.borrow().len() as i64 => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => break,
            }
        }
    }
}
