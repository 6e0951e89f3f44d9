//! [`Exec`]: the links one collective runs over, and which one each collective takes.

use phalanx_collectives::{self as coll, Algorithm, Options};
use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{shm::ShmGroup, Transport};

/// The links a collective runs over: always the TCP mesh, plus shared memory when every rank
/// is on this host (then allreduce, broadcast and barrier use it).
pub(crate) struct Exec {
    pub(crate) transport: Box<dyn Transport>,
    pub(crate) shm: Option<ShmGroup>,
    pub(crate) seq: u64,
}

impl Exec {
    pub(crate) fn tcp(&mut self) -> &mut dyn Transport {
        self.transport.as_mut()
    }

    pub(crate) fn allreduce<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        op: ReduceOp,
        opts: &Options,
    ) -> phalanx_transport::Result<Algorithm> {
        match self.shm.as_mut() {
            Some(g) => coll::allreduce_shm(g, seq, buf, op),
            None => coll::allreduce(self.transport.as_mut(), seq, buf, op, opts),
        }
    }

    pub(crate) fn broadcast<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        root: usize,
        opts: &Options,
    ) -> phalanx_transport::Result<Algorithm> {
        match self.shm.as_mut() {
            Some(g) => coll::broadcast_shm(g, seq, buf, root),
            None => coll::broadcast(self.transport.as_mut(), seq, buf, root, opts),
        }
    }

    pub(crate) fn barrier(&mut self, seq: u64) -> phalanx_transport::Result<Algorithm> {
        match self.shm.as_mut() {
            Some(g) => coll::barrier_shm(g, seq),
            None => coll::barrier(self.transport.as_mut(), seq),
        }
    }
}
