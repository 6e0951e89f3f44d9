//! [`Exec`]: the links one collective runs over, and the dispatch of each collective to the
//! algorithm `phalanx_collectives::select` chose (Note [Choosing an algorithm]).
//!
//! Note [Backends]: a process group has one backend for its lifetime. `Native` runs phalanx's
//! own algorithms (`phalanx-collectives`) over the TCP mesh and, within one host, shared
//! memory; `Mpi` hands every collective to the MPI library on `MPI_COMM_WORLD`; `Nccl` runs
//! allreduce, broadcast, allgather, reduce_scatter and barrier in NCCL on this rank's GPU, and
//! send/recv over a native mesh (Note [NCCL buffers] in `nccl/mod.rs`). Everything
//! above this file (issue order, `Work`, fail-fast, traces, DDP, the trainer) is the same
//! for both: they only see `Exec`'s methods.

use phalanx_collectives::{
    self as coll, Algorithm, Op, Options, P2pRecv, P2pSend, Placement, Plan,
};
use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{shm::ShmGroup, CollectiveKind, Transport};

use crate::P2POp;

/// What a collective returns: the algorithm it used.
type Ran = phalanx_transport::Result<Algorithm>;

/// The links of a process group, its collective sequence number and its point-to-point ones.
pub(crate) struct Exec {
    pub(crate) links: Links,
    /// The group's collective sequence: every rank's collectives in issue order.
    pub(crate) seq: u64,
    /// Point-to-point messages sent to each peer so far (each pair numbers its own
    /// messages, so send/recv among some ranks leaves the others' sequence alone).
    sent: Vec<u64>,
    /// Point-to-point messages received from each peer so far.
    received: Vec<u64>,
}

/// NCCL's `ncclAvg` (NCCL 2.10 and later): the division happens on the device.
#[cfg(feature = "nccl")]
const NCCL_AVG: std::ffi::c_int = 4;

/// The backend (Note [Backends]).
pub(crate) enum Links {
    /// Always the TCP mesh, plus shared memory when every rank is on this host (then
    /// allreduce, broadcast and barrier use it), or among this host's ranks for the
    /// hierarchical allreduce (`PHALANX_ALGO=hierarchical` across hosts; allreduce only).
    Native {
        transport: Box<dyn Transport>,
        shm: Option<ShmGroup>,
    },
    /// The MPI library's collectives.
    #[cfg(feature = "mpi")]
    Mpi(crate::mpi::MpiComm),
    /// NCCL's collectives on this rank's GPU.
    #[cfg(feature = "nccl")]
    Nccl(Box<crate::nccl::NcclComm>),
}

impl Links {
    /// The backend's name, as `--backend` spells it.
    pub(crate) fn backend(&self) -> &'static str {
        match self {
            Links::Native { .. } => "native",
            #[cfg(feature = "mpi")]
            Links::Mpi(_) => "mpi",
            #[cfg(feature = "nccl")]
            Links::Nccl(_) => "nccl",
        }
    }
}

impl Exec {
    pub(crate) fn new(links: Links, world_size: usize) -> Exec {
        Exec {
            links,
            seq: 0,
            sent: vec![0; world_size],
            received: vec![0; world_size],
        }
    }

    fn next(counts: &mut [u64], peer: usize) -> u64 {
        let seq = counts[peer];
        counts[peer] += 1;
        seq
    }

    /// Which algorithm the native backend runs for `op` on `bytes` (Note [Choosing an
    /// algorithm] in phalanx-collectives): the one place that knows; this file only dispatches.
    /// MPI and NCCL choose inside their libraries (`Plan::Local` here, unused).
    fn plan(&self, op: Op, bytes: usize, opts: &Options) -> Plan {
        match &self.links {
            Links::Native { transport, shm } => {
                let world = transport.world_size();
                let placement = match shm {
                    Some(g) if g.world_size() == world => Placement::SharedMemory {
                        single_copy: g.single_copy(),
                    },
                    Some(_) => Placement::HostSharedMemory,
                    None => Placement::Tcp,
                };
                coll::select(op, bytes, world, placement, opts)
            }
            #[allow(unreachable_patterns)]
            _ => Plan::Local,
        }
    }

    /// The name of what ran a collective, for traces and `PHALANX_DEBUG=INFO`.
    pub(crate) fn describe(&self, algo: Algorithm) -> String {
        match &self.links {
            Links::Native { .. } => format!("{algo:?}"),
            #[cfg(feature = "mpi")]
            Links::Mpi(_) => "MPI".to_string(),
            #[cfg(feature = "nccl")]
            Links::Nccl(_) => "NCCL".to_string(),
        }
    }

    pub(crate) fn allreduce<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran {
        let plan = self.plan(Op::Allreduce, std::mem::size_of_val(buf), opts);
        match &mut self.links {
            Links::Native {
                shm: Some(g),
                transport,
            } if plan == Plan::HierarchicalShm => {
                coll::allreduce_hierarchical_shm(transport.as_mut(), g, seq, buf, op, opts)
            }
            Links::Native { shm: Some(g), .. } if plan.is_shared_memory() => {
                coll::allreduce_shm(g, seq, buf, op)
            }
            Links::Native { transport, .. } => {
                coll::allreduce(transport.as_mut(), seq, buf, op, opts)
            }
            #[cfg(feature = "mpi")]
            Links::Mpi(m) => m.allreduce(buf, op),
            #[cfg(feature = "nccl")]
            Links::Nccl(n) => n.allreduce(buf, op),
        }
    }

    pub(crate) fn broadcast<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        root: usize,
        opts: &Options,
    ) -> Ran {
        let plan = self.plan(Op::Broadcast, std::mem::size_of_val(buf), opts);
        match &mut self.links {
            Links::Native { shm: Some(g), .. } if plan.is_shared_memory() => {
                coll::broadcast_shm(g, seq, buf, root)
            }
            Links::Native { transport, .. } => {
                coll::broadcast(transport.as_mut(), seq, buf, root, opts)
            }
            #[cfg(feature = "mpi")]
            Links::Mpi(m) => m.broadcast(buf, root),
            #[cfg(feature = "nccl")]
            Links::Nccl(n) => n.broadcast(buf, root),
        }
    }

    pub(crate) fn barrier(&mut self, seq: u64) -> Ran {
        let plan = self.plan(Op::Barrier, 0, &Options::default());
        match &mut self.links {
            Links::Native { shm: Some(g), .. } if plan.is_shared_memory() => {
                coll::barrier_shm(g, seq)
            }
            Links::Native { transport, .. } => coll::barrier(transport.as_mut(), seq),
            #[cfg(feature = "mpi")]
            Links::Mpi(m) => m.barrier(),
            #[cfg(feature = "nccl")]
            Links::Nccl(n) => n.barrier(),
        }
    }

    pub(crate) fn allgather<T: Element>(
        &mut self,
        seq: u64,
        send: &[T],
        recv: &mut [T],
        opts: &Options,
    ) -> Ran {
        let plan = self.plan(Op::Allgather, std::mem::size_of_val(recv), opts);
        match &mut self.links {
            Links::Native { shm: Some(g), .. } if plan.is_shared_memory() => {
                let offsets: Vec<usize> = (0..=g.world_size()).map(|p| p * send.len()).collect();
                coll::allgather_shm(g, seq, send, recv, &offsets, CollectiveKind::Allgather)
            }
            Links::Native { transport, .. } => {
                coll::allgather(transport.as_mut(), seq, send, recv, opts)
            }
            #[cfg(feature = "mpi")]
            Links::Mpi(m) => m.allgather(send, recv),
            #[cfg(feature = "nccl")]
            Links::Nccl(n) => n.allgather(send, recv),
        }
    }

    pub(crate) fn reduce_scatter<T: Element>(
        &mut self,
        seq: u64,
        send: &mut [T],
        recv: &mut [T],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran {
        let plan = self.plan(Op::ReduceScatter, std::mem::size_of_val(send), opts);
        match &mut self.links {
            Links::Native { shm: Some(g), .. } if plan.is_shared_memory() => {
                let offsets: Vec<usize> = (0..=g.world_size()).map(|p| p * recv.len()).collect();
                let kind = CollectiveKind::ReduceScatter;
                coll::reduce_scatter_shm(g, seq, send, recv, &offsets, op, kind)
            }
            Links::Native { transport, .. } => {
                coll::reduce_scatter(transport.as_mut(), seq, send, recv, op, opts)
            }
            #[cfg(feature = "mpi")]
            Links::Mpi(m) => m.reduce_scatter(send, recv, op),
            #[cfg(feature = "nccl")]
            Links::Nccl(n) => n.reduce_scatter(send, recv, op),
        }
    }

    pub(crate) fn send<T: Element>(&mut self, buf: &[T], peer: usize, tag: u32) -> Ran {
        match &mut self.links {
            Links::Native { transport, .. } => {
                let seq = Self::next(&mut self.sent, peer);
                coll::send(transport.as_mut(), seq, buf, peer, tag).map(|()| Algorithm::Direct)
            }
            #[cfg(feature = "mpi")]
            Links::Mpi(m) => m.send(buf, peer, tag),
            #[cfg(feature = "nccl")]
            Links::Nccl(n) => n.send(buf, peer, tag),
        }
    }

    pub(crate) fn recv<T: Element>(&mut self, buf: &mut [T], peer: usize, tag: u32) -> Ran {
        match &mut self.links {
            Links::Native { transport, .. } => {
                let seq = Self::next(&mut self.received, peer);
                coll::recv(transport.as_mut(), seq, buf, peer, tag).map(|()| Algorithm::Direct)
            }
            #[cfg(feature = "mpi")]
            Links::Mpi(m) => m.recv(buf, peer, tag),
            #[cfg(feature = "nccl")]
            Links::Nccl(n) => n.recv(buf, peer, tag),
        }
    }

    /// The transport of the native backend: the collectives only it runs (reduce, gather,
    /// scatter, all_to_all, allgather_v, reduce_scatter_v) take it. `ProcessGroup` refuses them on the other
    /// backends before they get here.
    fn native(&mut self) -> &mut dyn Transport {
        match &mut self.links {
            Links::Native { transport, .. } => transport.as_mut(),
            #[cfg(feature = "mpi")]
            Links::Mpi(_) => unreachable!("ProcessGroup::require_native refuses MPI"),
            #[cfg(feature = "nccl")]
            Links::Nccl(_) => unreachable!("ProcessGroup::require_native refuses NCCL"),
        }
    }

    pub(crate) fn reduce<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        op: ReduceOp,
        root: usize,
        opts: &Options,
    ) -> Ran {
        coll::reduce(self.native(), seq, buf, op, root, opts)
    }

    pub(crate) fn gather<T: Element>(
        &mut self,
        seq: u64,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Ran {
        coll::gather(self.native(), seq, send, recv, root)
    }

    pub(crate) fn scatter<T: Element>(
        &mut self,
        seq: u64,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Ran {
        coll::scatter(self.native(), seq, send, recv, root)
    }

    /// `equal`: the caller asked for equal blocks (every rank did: the same API), which shared
    /// memory runs; unequal splits go over TCP.
    pub(crate) fn all_to_all<T: Element>(
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
        match &mut self.links {
            Links::Native { shm: Some(g), .. } if plan.is_shared_memory() => {
                coll::all_to_all_shm(g, seq, send, recv)
            }
            _ => coll::all_to_all(self.native(), seq, send, send_counts, recv, recv_counts),
        }
    }

    pub(crate) fn allgather_v<T: Element>(
        &mut self,
        seq: u64,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        opts: &Options,
    ) -> Ran {
        let plan = self.plan(Op::Allgather, std::mem::size_of_val(recv), opts);
        match &mut self.links {
            Links::Native { shm: Some(g), .. } if plan.is_shared_memory() => {
                let offsets = coll::segments::block_offsets(counts);
                coll::allgather_shm(g, seq, send, recv, &offsets, CollectiveKind::AllgatherV)
            }
            _ => coll::allgather_v(self.native(), seq, send, recv, counts, opts),
        }
    }

    pub(crate) fn reduce_scatter_v<T: Element>(
        &mut self,
        seq: u64,
        send: &mut [T],
        recv: &mut [T],
        counts: &[usize],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran {
        let algo = self.reduce_scatter_v_in_place(seq, send, counts, op, opts)?;
        let start: usize = counts[..self.rank()].iter().sum();
        recv.copy_from_slice(&send[start..start + recv.len()]);
        Ok(algo)
    }

    /// This rank in the group (the shared-memory group's or the transport's).
    fn rank(&self) -> usize {
        match &self.links {
            Links::Native { transport, .. } => transport.rank(),
            #[cfg(feature = "mpi")]
            Links::Mpi(_) => unreachable!("reduce_scatter_v is native only"),
            #[cfg(feature = "nccl")]
            Links::Nccl(_) => unreachable!("reduce_scatter_v is native only"),
        }
    }

    /// reduce_scatter_v leaving this rank's block of `buf` reduced in place.
    pub(crate) fn reduce_scatter_v_in_place<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        counts: &[usize],
        op: ReduceOp,
        opts: &Options,
    ) -> Ran {
        let plan = self.plan(Op::ReduceScatter, std::mem::size_of_val(buf), opts);
        match &mut self.links {
            Links::Native { shm: Some(g), .. } if plan.is_shared_memory() => {
                let offsets = coll::segments::block_offsets(counts);
                let kind = CollectiveKind::ReduceScatterV;
                coll::reduce_scatter_shm_in_place(g, seq, buf, &offsets, op, kind)
            }
            _ => coll::reduce_scatter_v_in_place(self.native(), seq, buf, counts, op, opts),
        }
    }

    /// Every send and receive of `ops` at once (`batch_isend_irecv`). The MPI backend is
    /// refused before this is called.
    pub(crate) fn send_recv_batch<T: Element>(&mut self, ops: &mut [P2POp<T>]) -> Ran {
        match &mut self.links {
            Links::Native { transport, .. } => {
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
                coll::send_recv_batch(transport.as_mut(), &sends, &mut recvs)
                    .map(|()| Algorithm::Direct)
            }
            #[cfg(feature = "mpi")]
            Links::Mpi(_) => unreachable!("ProcessGroup::batch_isend_irecv refuses MPI"),
            #[cfg(feature = "nccl")]
            Links::Nccl(n) => n.send_recv_batch(ops),
        }
    }

    /// Stops every link so that peers learn of the failure at once (Note [Fail fast]).
    #[cfg_attr(not(feature = "mpi"), allow(unused_variables))]
    pub(crate) fn abort(&mut self, rank: usize, cause: &str) {
        match &mut self.links {
            Links::Native { transport, shm } => {
                if let Some(g) = shm.as_mut() {
                    g.abort(cause);
                }
                transport.abort(cause)
            }
            #[cfg(feature = "mpi")]
            Links::Mpi(_) => crate::mpi::MpiComm::abort_job(rank, cause),
            #[cfg(feature = "nccl")]
            Links::Nccl(n) => n.abort(cause),
        }
    }

    /// NCCL's allreduce of GPU memory in place (`Avg` divides on the device, `ncclAvg`).
    ///
    /// # Safety
    /// As `ProcessGroup::allreduce_device`; the caller checked that the backend is NCCL.
    #[cfg(feature = "nccl")]
    pub(crate) unsafe fn allreduce_device(&mut self, buf: crate::DeviceSlice, op: ReduceOp) -> Ran {
        let Links::Nccl(n) = &mut self.links else {
            unreachable!("checked by require_device_buffers; a group keeps its backend")
        };
        let code = if op == ReduceOp::Avg {
            NCCL_AVG
        } else {
            crate::nccl::nccl_op(op)
        };
        n.make_current()?;
        // SAFETY: the caller's contract.
        unsafe { n.allreduce_device_code(buf.ptr, buf.len, buf.dtype, code)? };
        n.wait("ncclAllReduce")?;
        Ok(Algorithm::Direct)
    }

    /// NCCL's broadcast of GPU memory in place.
    ///
    /// # Safety
    /// As `ProcessGroup::broadcast_device`; the caller checked that the backend is NCCL.
    #[cfg(feature = "nccl")]
    pub(crate) unsafe fn broadcast_device(&mut self, buf: crate::DeviceSlice, root: usize) -> Ran {
        let Links::Nccl(n) = &mut self.links else {
            unreachable!("checked by require_device_buffers; a group keeps its backend")
        };
        n.make_current()?;
        // SAFETY: the caller's contract.
        unsafe { n.broadcast_device(buf.ptr, buf.len, buf.dtype, root)? };
        n.wait("ncclBroadcast")?;
        Ok(Algorithm::Direct)
    }
}
