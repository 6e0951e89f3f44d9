//! `--rdzv-backend static` (torchrun's static TCP rendezvous) and `--standalone`: node 0 hosts
//! the store at the master address, every node gives its `--node-rank`, and node 0 is in
//! every round: losing it ends the job, as with torchrun.

use phalanx_store::Store;

use super::backend::{Arrival, Met, Rendezvous};
use super::hosted::Hosted;
use super::spelling::Meeting;
use crate::Error;

pub(crate) struct StaticTcp {
    hosted: Hosted,
}

impl StaticTcp {
    pub(crate) fn new(meeting: Meeting) -> Self {
        StaticTcp {
            hosted: Hosted::new(meeting),
        }
    }
}

impl Rendezvous for StaticTcp {
    fn meet(&mut self, a: &Arrival<'_>) -> Result<Met, Error> {
        self.hosted.open(a)
    }

    fn store_host(&self) -> Option<u32> {
        Some(0)
    }

    fn master(&self, _: &dyn Store, _: &[u32]) -> Result<(String, u16), Error> {
        Ok(self.hosted.master())
    }

    /// Node ranks are given, so there is none to free.
    fn free_node_rank(&self, _: &dyn Store, _: u32) {}

    fn leave(&mut self, _: Option<&dyn Store>) {}
}
