//! Multi-node coordination through the store: publishing a round's root cause (first writer
//! wins), polling for the other nodes' failures, and the exit barrier that keeps node 0's
//! store up until every node is done.

use std::time::{Duration, Instant};

use crate::agent::Agent;
use crate::rendezvous::key;
use crate::signals;
use crate::summary::RootCause;

/// What the exit barrier ended in, when not plain success.
pub(crate) enum BarrierEnd {
    Signal(i32),
    Remote(RootCause),
}

/// How long node 0 keeps its store up for the other agents to read the barrier's end.
const LEAVE_WAIT: Duration = Duration::from_secs(5);

impl Agent<'_> {
    /// Publishes `cause` as round `round`'s root cause unless another node was first; returns
    /// the root cause every agent will report.
    pub(crate) fn publish(&self, round: u32, cause: RootCause) -> RootCause {
        if self.args.nnodes == 1 || self.store_lost.get() {
            return cause;
        }
        let k = key(round, "failed");
        let mine = serde_json::to_vec(&cause).expect("a root cause serialises");
        match self.ctl.compare_set(&k, b"", &mine) {
            Ok(got) if got != mine => serde_json::from_slice(&got).unwrap_or(cause),
            Ok(_) => cause,
            Err(e) => {
                self.store_lost.set(true);
                eprintln!("phalanx launch: could not tell the other nodes about the failure: {e}");
                cause
            }
        }
    }

    /// Another node's failure in round `round`, if one was published (multi-node only). A
    /// store that stopped answering is itself a failure: node 0's agent is gone.
    pub(crate) fn poll_failed(&self, round: u32) -> Option<RootCause> {
        if self.args.nnodes == 1 || self.store_lost.get() {
            return None;
        }
        let k = key(round, "failed");
        let got = self.ctl.check(&[&k]).and_then(|present| {
            if present {
                self.ctl.get(&k).map(Some)
            } else {
                Ok(None)
            }
        });
        match got {
            Ok(None) => None,
            Ok(Some(v)) => Some(serde_json::from_slice(&v).unwrap_or_else(|e| RootCause {
                what: format!("another node reported a failure this agent cannot read: {e}"),
                ..self.agent_cause(1, false)
            })),
            Err(e) => {
                self.store_lost.set(true);
                Some(RootCause {
                    what: format!("lost the store on node 0 ({e}); is node 0's agent gone?"),
                    ..self.agent_cause(1, false)
                })
            }
        }
    }

    /// A root cause that names this agent rather than a worker.
    pub(crate) fn agent_cause(&self, code: u8, restartable: bool) -> RootCause {
        RootCause {
            group_rank: self.args.node_rank,
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
        if self.args.nnodes == 1 || self.store_lost.get() {
            return None;
        }
        let nnodes = i64::from(self.args.nnodes);
        let done = key(round, "done");
        let left = key(round, "left");
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
            std::thread::sleep(self.args.monitor_interval);
        }
        if self.args.node_rank != 0 {
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
}
