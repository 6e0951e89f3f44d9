//! [`Exec`]: the links one collective runs over, and which one each collective takes.
//!
//! Note [Backends]: a process group has one backend for its lifetime. `Native` runs phalanx's
//! own algorithms (`phalanx-collectives`) over the TCP mesh and, within one host, shared
//! memory; `Mpi` hands every collective to the MPI library on `MPI_COMM_WORLD`; `Nccl` runs
//! allreduce, broadcast, allgather, reduce_scatter and barrier in NCCL on this rank's GPU, and
//! send/recv over a native mesh (Note [NCCL buffers] in `nccl/mod.rs`). Everything
//! above this file (issue order, `Work`, fail-fast, traces, DDP, the trainer) is the same
//! for both: they only see `Exec`'s methods.

use phalanx_collectives::{self as coll, Algorithm, Options};
use phalanx_core::{Element, ReduceOp};
use phalanx_transport::{shm::ShmGroup, Transport};

/// What a collective returns: the algorithm it used.
type Ran = phalanx_transport::Result<Algorithm>;

/// The links of a process group and its collective sequence number.
pub(crate) struct Exec {
    pub(crate) links: Links,
    pub(crate) seq: u64,
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

impl Exec {
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
        match &mut self.links {
            Links::Native {
                shm: Some(g),
                transport,
            } if g.world_size() < transport.world_size() => {
                coll::allreduce_hierarchical_shm(transport.as_mut(), g, seq, buf, op, opts)
            }
            Links::Native { shm: Some(g), .. } => coll::allreduce_shm(g, seq, buf, op),
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
        match &mut self.links {
            Links::Native {
                shm: Some(g),
                transport,
            } if g.world_size() == transport.world_size() => coll::broadcast_shm(g, seq, buf, root),
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
        match &mut self.links {
            Links::Native {
                shm: Some(g),
                transport,
            } if g.world_size() == transport.world_size() => coll::barrier_shm(g, seq),
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
        match &mut self.links {
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
        match &mut self.links {
            Links::Native { transport, .. } => {
                coll::reduce_scatter(transport.as_mut(), seq, send, recv, op, opts)
            }
            #[cfg(feature = "mpi")]
            Links::Mpi(m) => m.reduce_scatter(send, recv, op),
            #[cfg(feature = "nccl")]
            Links::Nccl(n) => n.reduce_scatter(send, recv, op),
        }
    }

    pub(crate) fn send<T: Element>(&mut self, seq: u64, buf: &[T], peer: usize, tag: u32) -> Ran {
        match &mut self.links {
            Links::Native { transport, .. } => {
                coll::send(transport.as_mut(), seq, buf, peer, tag).map(|()| Algorithm::Direct)
            }
            #[cfg(feature = "mpi")]
            Links::Mpi(m) => m.send(buf, peer, tag),
            #[cfg(feature = "nccl")]
            Links::Nccl(n) => n.send(buf, peer, tag),
        }
    }

    pub(crate) fn recv<T: Element>(
        &mut self,
        seq: u64,
        buf: &mut [T],
        peer: usize,
        tag: u32,
    ) -> Ran {
        match &mut self.links {
            Links::Native { transport, .. } => {
                coll::recv(transport.as_mut(), seq, buf, peer, tag).map(|()| Algorithm::Direct)
            }
            #[cfg(feature = "mpi")]
            Links::Mpi(m) => m.recv(buf, peer, tag),
            #[cfg(feature = "nccl")]
            Links::Nccl(n) => n.recv(buf, peer, tag),
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
