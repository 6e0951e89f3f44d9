//! What every rendezvous backend does for an agent ([`Rendezvous`]): meet the others, say who
//! hosts the job's store and where a round's PyTorch store is, free a lost node's rank, and
//! give back what it took when the agent ends. [`Met`] is what the agent holds once it met
//! them.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use phalanx_store::{Auth, EtcdOptions, Store};

use super::spelling::RdzvConf;
use crate::Error;

/// This agent as it arrives.
pub(crate) struct Arrival<'a> {
    /// The job's id and secret.
    pub(crate) auth: &'a Auth,
    /// `--node-rank` (0 when not given); ignored where ranks are taken on arrival.
    pub(crate) node_rank: u32,
    /// `MAX` of `--nnodes`.
    pub(crate) nnodes_max: u32,
    /// Host name and a random nonce: what holds a node rank taken on arrival.
    pub(crate) me: String,
    /// `--local-addr`.
    pub(crate) local_addr: Option<&'a str>,
    /// `--torch-store`: the hosted store answers PyTorch's protocol from other hosts too.
    pub(crate) torch_store: bool,
    /// `--rdzv-conf`.
    pub(crate) conf: &'a RdzvConf,
    /// How long meeting may take: PHALANX_TIMEOUT, or `--rdzv-conf timeout`.
    pub(crate) timeout: Duration,
    /// The bound on each call of the agents' control handle.
    pub(crate) control_timeout: Duration,
}

/// What an agent holds once it met the others.
pub(crate) struct Met {
    /// This node's rank: the one given, or the one taken on arrival.
    pub(crate) node_rank: u32,
    /// The job's store, each call bounded by the rendezvous timeout.
    pub(crate) store: Arc<dyn Store>,
    /// The same store, each call bounded by the control timeout (the coordinator's handle).
    pub(crate) ctl: Arc<dyn Store>,
    /// Where the other agents link to this one (Note [Agent links]), where any node may be
    /// lost; `None` where a node hosts the store, whose loss ends the job anyway.
    pub(crate) links_at: Option<IpAddr>,
    /// How the workers reach the job's store when it lives in etcd.
    pub(crate) etcd: Option<EtcdOptions>,
    /// A control handle whose writes expire when this agent is gone (etcd's leases: Note
    /// [etcd leases] in phalanx-store), for its heartbeat; `None` where nothing expires.
    pub(crate) beat: Option<Arc<dyn Store>>,
    /// A control handle bounded by about one poll, for the monitor's reads where the store
    /// may stop answering for an election (Note [The monitor does not wait out an election]
    /// in `elastic/coordinate.rs`); `None`: `ctl`.
    pub(crate) watch: Option<Arc<dyn Store>>,
}

/// One way for the agents to meet (`static_tcp.rs`, `c10d.rs`, `etcd.rs`).
pub(crate) trait Rendezvous {
    /// Reaches (or hosts) the job's store and takes this node's rank.
    fn meet(&mut self, arrival: &Arrival<'_>) -> Result<Met, Error>;

    /// The node whose agent hosts the job's store: it is in every round and closes the
    /// elastic ones, and the job cannot go on without it. `None` where no node hosts the
    /// store (Note [Elastic rounds]).
    fn store_host(&self) -> Option<u32>;

    /// How long the job's store may go unanswered before it counts as lost (Note [An
    /// election is not a lost store] in `elastic/coordinate.rs`): none for a store an agent
    /// hosts, whose agent is gone when it does not answer.
    fn store_grace(&self) -> Duration {
        Duration::ZERO
    }

    /// `MASTER_ADDR`/`MASTER_PORT` for the workers of a round of `members`.
    fn master(&self, store: &dyn Store, members: &[u32]) -> Result<(String, u16), Error>;

    /// The leader frees lost node `g`'s rank where ranks are taken on arrival, so that the
    /// node restarted (or another) can take it (Note [c10d node ranks]).
    fn free_node_rank(&self, store: &dyn Store, g: u32);

    /// Gives back what [`Rendezvous::meet`] took, as the agent ends. `ctl` is the control
    /// handle while the store answers, `None` once it was lost.
    fn leave(&mut self, ctl: Option<&dyn Store>);
}
