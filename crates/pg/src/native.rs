//! [`Native`]: phalanx's own backend, the algorithms of `phalanx-collectives` over the TCP mesh
//! and, within one host, shared memory, each chosen by `phalanx_collectives::select` (Note
//! [Choosing an algorithm]).

use phalanx_collectives::{
    self as coll, Algorithm, Op, Options, P2pRecv, P2pSend, Placement, Plan,
};
use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{shm::ShmGroup, CollectiveKind, Transport};

use crate::{
    backend::{Backend, Ran},
    P2POp,
};

/// The TCP mesh, plus shared memory when every rank is on this host (then allreduce,
/// broadcast, barrier, allgather, reduce_scatter and all_to_all may use it), or among this
/// host's ranks for the hierarchical allreduce (`PHALANX_ALGO=hierarchical` across hosts;
/// allreduce only).
pub(crate) struct Native {
    transport: Box<dyn Transport>,
    shm: Option<ShmGroup>,
    /// Point-to-point messages sent to each peer so far (each pair numbers its own
    /// messages, so send/recv among some ranks leaves the others' sequence alone).
    sent: Vec<u64>,
    /// Point-to-point messages received from each peer so far.
    received: Vec<u64>,
}

impl Native {
    pub(crate) fn new(transport: Box<dyn Transport>, shm: Option<ShmGroup>) -> Native {
        let world_size = transport.world_size();
        Native {
            transport,
            shm,
            sent: vec![0; world_size],
            received: vec![0; world_size],
        }
    }

    /// The next message number of `peer` in `counts`.
    fn next(counts: &mut [u64], peer: usize) -> u64 {
        let seq = counts[peer];
        counts[peer] += 1;
        seq
    }

    /// Which algorithm runs `op` on `bytes` (Note [Choosing an algorithm] in
    /// phalanx-collectives): the one place that knows; this file only follows the plan.
    fn plan(&self, op: Op, bytes: usize, opts: &Options) -> Plan {
        let world = self.transport.world_size();
        let placement = match &self.shm {
            Some(g) if g.world_size() == world => Placement::SharedMemory {
                single_copy: g.single_copy(),
            },
            Some(_) => Placement::HostSharedMemory,
            None => Placement::Tcp,
        };
        coll::select(op, bytes, world, placement, opts)
    }

    /// The shared-memory group, when `plan` runs on it.
    fn shm_for(&mut self, plan: Plan) -> Option<&mut ShmGroup> {
        self.shm.as_mut().filter(|_| plan.is_shared_memory())
    }
}

impl Backend for Native {
    fn name(&self) -> &'static str {
        "native"
    }

    fn describe(&self, algo: Algorithm) -> String {
        format!("{algo:?}")
    }

    fn picks_algorithm(&self) -> bool {
        true
    }

    /// A waiting point-to-point step reads its other peers' frames ahead (Note [Sends that
    /// read] in phalanx-transport).
    fn sends_complete_alone(&self) -> bool {
        true
    }

    fn allreduce<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran {
        let plan = self.plan(Op::Allreduce, std::mem::size_of_val(buf), opts);
        match &mut self.shm {
            Some(g) if plan == Plan::HierarchicalShm => {
                coll::allreduce_hierarchical_shm(self.transport.as_mut(), g, seq, buf, op, opts)
            }
            Some(g) if plan.is_shared_memory() => coll::allreduce_shm(g, seq, buf, op),
            _ => coll::allreduce(self.transport.as_mut(), seq, buf, op, opts),
        }
    }

    fn broadcast<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        root: usize,
        opts: &Options,
    ) -> Ran {
        let plan = self.plan(Op::Broadcast, std::mem::size_of_val(buf), opts);
        match self.shm_for(plan) {
            Some(g) => coll::broadcast_shm(g, seq, buf, root),
            None => coll::broadcast(self.transport.as_mut(), seq, buf, root, opts),
        }
    }

    fn barrier(&mut self, seq: u64) -> Ran {
        let plan = self.plan(Op::Barrier, 0, &Options::default());
        match self.shm_for(plan) {
            Some(g) => coll::barrier_shm(g, seq),
            None => coll::barrier(self.transport.as_mut(), seq),
        }
    }

    fn allgather<T: Element>(
        &mut self,
        seq: u64,
        send: &[T],
        recv: &mut [T],
        opts: &Options,
    ) -> Ran {
        let plan = self.plan(Op::Allgather, std::mem::size_of_val(recv), opts);
        match self.shm_for(plan) {
            Some(g) => {
                let offsets: Vec<usize> = (0..=g.world_size()).map(|p| p * send.len()).collect();
                coll::allgather_shm(g, seq, send, recv, &offsets, CollectiveKind::Allgather)
            }
            None => coll::allgather(self.transport.as_mut(), seq, send, recv, opts),
        }
    }

    fn reduce_scatter<T: Element>(
        &mut self,
        seq: u64,
        send: &mut [T],
        recv: &mut [T],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran {
        let plan = self.plan(Op::ReduceScatter, std::mem::size_of_val(send), opts);
        match self.shm_for(plan) {
            Some(g) => {
                let offsets: Vec<usize> = (0..=g.world_size()).map(|p| p * recv.len()).collect();
                let kind = CollectiveKind::ReduceScatter;
                coll::reduce_scatter_shm(g, seq, send, recv, &offsets, op, kind)
            }
            None => coll::reduce_scatter(self.transport.as_mut(), seq, send, recv, op, opts),
        }
    }

    fn send<T: Element>(&mut self, buf: &[T], peer: usize, tag: u32) -> Ran {
        let seq = Self::next(&mut self.sent, peer);
        coll::send(self.transport.as_mut(), seq, buf, peer, tag).map(|()| Algorithm::Direct)
    }

    fn recv<T: Element>(&mut self, buf: &mut [T], peer: usize, tag: u32) -> Ran {
        let seq = Self::next(&mut self.received, peer);
        coll::recv(self.transport.as_mut(), seq, buf, peer, tag).map(|()| Algorithm::Direct)
    }

    fn set_wait_spin(&mut self, spin: std::time::Duration) {
        // The point-to-point messages go over TCP; the shared-memory collectives keep their
        // own adaptive budget (Note [Spin then sleep] in phalanx-transport).
        self.transport.set_wait_spin(spin)
    }

    fn start_progress(&mut self) -> phalanx_transport::Result<()> {
        // Point-to-point messages go over TCP only (Note [Background progress] in
        // phalanx-transport).
        self.transport.start_progress()
    }

    fn abort(&mut self, _rank: usize, cause: &str) {
        if let Some(g) = self.shm.as_mut() {
            g.abort(cause);
        }
        self.transport.abort(cause)
    }

    fn send_recv_batch<T: Element>(&mut self, ops: &mut [P2POp<T>]) -> Ran {
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        for op in ops.iter_mut() {
            match op {
                P2POp::Send { buf, peer, tag } => sends.push(P2pSend {
                    peer: *peer,
                    seq: Self::next(&mut self.sent, *peer),
                    tag: *tag,
                    buf,
                }),
                P2POp::Recv { buf, peer, tag } => recvs.push(P2pRecv {
                    peer: *peer,
                    seq: Self::next(&mut self.received, *peer),
                    tag: *tag,
                    buf,
                }),
            }
        }
        coll::send_recv_batch(self.transport.as_mut(), &sends, &mut recvs)
            .map(|()| Algorithm::Direct)
    }

    fn reduce<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        op: ReduceOp,
        root: usize,
        opts: &Options,
    ) -> Ran {
        coll::reduce(self.transport.as_mut(), seq, buf, op, root, opts)
    }

    fn gather<T: Element>(&mut self, seq: u64, send: &[T], recv: &mut [T], root: usize) -> Ran {
        coll::gather(self.transport.as_mut(), seq, send, recv, root)
    }

    fn scatter<T: Element>(&mut self, seq: u64, send: &[T], recv: &mut [T], root: usize) -> Ran {
        coll::scatter(self.transport.as_mut(), seq, send, recv, root)
    }

    /// Equal blocks (`equal`: every rank asked for them, the same API) may run in shared
    /// memory; unequal splits go over TCP.
    fn all_to_all<T: Element>(
        &mut self,
        seq: u64,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        equal: bool,
    ) -> Ran {
        let bytes = std::mem::size_of_val(send);
        let plan = self.plan(Op::AllToAll { equal }, bytes, &Options::default());
        match self.shm_for(plan) {
            Some(g) => coll::all_to_all_shm(g, seq, send, recv),
            None => coll::all_to_all(
                self.transport.as_mut(),
                seq,
                send,
                send_counts,
                recv,
                recv_counts,
            ),
        }
    }

    fn allgather_v<T: Element>(
        &mut self,
        seq: u64,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        opts: &Options,
    ) -> Ran {
        let plan = self.plan(Op::Allgather, std::mem::size_of_val(recv), opts);
        match self.shm_for(plan) {
            Some(g) => {
                let offsets = coll::segments::block_offsets(counts);
                coll::allgather_shm(g, seq, send, recv, &offsets, CollectiveKind::AllgatherV)
            }
            None => coll::allgather_v(self.transport.as_mut(), seq, send, recv, counts, opts),
        }
    }

    fn reduce_scatter_v<T: Element>(
        &mut self,
        seq: u64,
        send: &mut [T],
        recv: &mut [T],
        counts: &[usize],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran {
        let algo = self.reduce_scatter_v_in_place(seq, send, counts, op, opts)?;
        let start: usize = counts[..self.transport.rank()].iter().sum();
        recv.copy_from_slice(&send[start..start + recv.len()]);
        Ok(algo)
    }

    fn reduce_scatter_v_in_place<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        counts: &[usize],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran {
        let plan = self.plan(Op::ReduceScatter, std::mem::size_of_val(buf), opts);
        match self.shm_for(plan) {
            Some(g) => {
                let offsets = coll::segments::block_offsets(counts);
                let kind = CollectiveKind::ReduceScatterV;
                coll::reduce_scatter_shm_in_place(g, seq, buf, &offsets, op, kind)
            }
            None => {
                coll::reduce_scatter_v_in_place(self.transport.as_mut(), seq, buf, counts, op, opts)
            }
        }
    }
}
