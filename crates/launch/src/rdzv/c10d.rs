//! `--rdzv-backend c10d`: the node at `--rdzv-endpoint` hosts the store and is node 0; every
//! other node takes its rank on arrival (Note [c10d node ranks]) and gives it back when its
//! agent ends. As with torchrun's c10d backend, the host is in every round and losing it ends
//! the job.

use phalanx_store::Store;

use super::backend::{Arrival, Met, Rendezvous};
use super::hosted::Hosted;
use super::node_rank::{give_back_node_rank, release_node_rank, take_node_rank};
use super::spelling::Meeting;
use crate::Error;

pub(crate) struct C10d {
    hosted: Hosted,
    /// The node rank taken on arrival and the identity that holds it, until the agent ends.
    taken: Option<(u32, String)>,
}

impl C10d {
    pub(crate) fn new(meeting: Meeting) -> Self {
        C10d {
            hosted: Hosted::new(meeting),
            taken: None,
        }
    }
}

impl Rendezvous for C10d {
    fn meet(&mut self, a: &Arrival<'_>) -> Result<Met, Error> {
        let mut met = self.hosted.open(a)?;
        if self.hosted.ranks_on_arrival() {
            met.node_rank = match self.hosted.here() {
                true => 0,
                false => {
                    let k = take_node_rank(&*met.store, 1, a.nnodes_max, &a.me, a.timeout)?;
                    let (host, port) = self.hosted.master();
                    eprintln!("phalanx launch: c10d rendezvous at {host}:{port}: this is node {k}");
                    self.taken = Some((k, a.me.clone()));
                    k
                }
            };
        }
        Ok(met)
    }

    fn store_host(&self) -> Option<u32> {
        Some(0)
    }

    fn master(&self, _: &dyn Store, _: &[u32]) -> Result<(String, u16), Error> {
        Ok(self.hosted.master())
    }

    fn free_node_rank(&self, store: &dyn Store, g: u32) {
        if self.hosted.ranks_on_arrival() {
            release_node_rank(store, g);
        }
    }

    /// Gives the node rank back through the control handle (bounded by the control timeout;
    /// nothing once node 0's store is lost), so that the next agent need not wait for the
    /// leader to declare this one lost.
    fn leave(&mut self, ctl: Option<&dyn Store>) {
        if let (Some((k, me)), Some(store)) = (&self.taken, ctl) {
            give_back_node_rank(store, *k, me);
        }
    }
}
