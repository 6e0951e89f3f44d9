//! The NCCL communicator and its collectives on host slices staged through device buffers
//! (Note [NCCL buffers] in `mod.rs`).
use std::{
    ffi::{c_int, c_void},
    sync::Arc,
    time::{Duration, Instant},
};

use phalanx_collectives::{Algorithm, Options};
use phalanx_core::{DType, Element, ReduceOp, Timeout};
use phalanx_transport::AbortHandle;

use phalanx_store::Store;

use super::device::{DeviceBuffer, Gpu};
use super::sys::{self, DevicePtr, Driver, Handle, Nccl, UniqueId, CUDA_ERROR_NOT_READY};
use crate::{
    backend::{Backend, Ran},
    DeviceSlice, Error, P2POp, Result,
};

/// The store key of the NCCL unique id (under the round's prefix).
const UNIQUE_ID_KEY: &str = "nccl/unique_id";

/// NCCL's `ncclAvg` (NCCL 2.10 and later): the division happens on the device.
const NCCL_AVG: c_int = 4;

/// An NCCL communicator with its GPU, stream and staging buffer.
pub(crate) struct NcclComm {
    pub(crate) nccl: &'static Nccl,
    pub(crate) driver: &'static Driver,
    pub(crate) gpu: Gpu,
    pub(crate) comm: Handle,
    pub(crate) stream: Handle,
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    /// Device memory for host-slice collectives; grows to the largest one.
    pub(crate) scratch: Option<DeviceBuffer>,
    pub(crate) timeout: std::time::Duration,
    /// Set by the group's failure path; a wait that sees it aborts the communicator.
    pub(crate) abort: AbortHandle,
    /// The native group: mesh for send/recv, and the failure protocol.
    pub(crate) native: Arc<dyn NativeGroup>,
}

/// The native group an NCCL communicator rides on for point-to-point traffic and its
/// failure protocol. `ProcessGroup` implements it (in `init.rs`, where the two meet): a
/// group's executor holds this communicator, so `nccl` cannot name `ProcessGroup` without an
/// import circle. Messages move as bytes, at both ends of an NCCL group's send and recv
/// alike, so their counts are compared in bytes (not elements) by the native fingerprints.
pub(crate) trait NativeGroup: Send + Sync {
    /// `ProcessGroup::send` of bytes.
    fn send_bytes(&self, buf: &[u8], peer: usize, tag: u32) -> Result<()>;
    /// `ProcessGroup::recv` of bytes.
    fn recv_bytes(&self, buf: &mut [u8], peer: usize, tag: u32) -> Result<()>;
    /// `ProcessGroup::batch_isend_irecv` of bytes, waited for.
    fn batch_bytes(&self, ops: Vec<P2POp<u8>>) -> Result<Vec<P2POp<u8>>>;
    /// `ProcessGroup::abort`.
    fn abort(&self, cause: &str);
}

// SAFETY: the handles are used under the process group's `Exec` lock only, one thread at a
// time, after making the context current on that thread.
unsafe impl Send for NcclComm {}
unsafe impl Send for Gpu {}

/// NCCL's `ncclDataType_t` of a phalanx dtype.
pub(crate) fn nccl_type(d: DType) -> c_int {
    match d {
        DType::U8 => 1,
        DType::I32 => 2,
        DType::I64 => 4,
        DType::F16 => 6,
        DType::F32 => 7,
        DType::F64 => 8,
        DType::BF16 => 9,
    }
}

/// NCCL's `ncclRedOp_t`; `Avg` is a `Sum` divided afterwards (Note [NCCL buffers]).
pub(crate) fn nccl_op(op: ReduceOp) -> c_int {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => 0,
        ReduceOp::Product => 1,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
        // NCCL has no bitwise reductions: the process group refuses them before NCCL runs.
        ReduceOp::BAnd | ReduceOp::BOr | ReduceOp::BXor => {
            unreachable!("check::Caller::reduce_op refuses bitwise ops on NCCL")
        }
    }
}

impl NcclComm {
    /// Creates the communicator of every rank of the native group `native` (rank `rank` of
    /// `world_size`, its store `store`) on `gpu`: rank 0's unique id through the store,
    /// `ncclCommInitRank`, and a non-blocking stream. `native` stays the group's mesh
    /// (send/recv) and failure protocol; `abort` wakes a waiting call.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn init(
        nccl: &'static Nccl,
        driver: &'static Driver,
        gpu: Gpu,
        (rank, world_size): (usize, usize),
        store: &dyn Store,
        native: Arc<dyn NativeGroup>,
        abort: AbortHandle,
    ) -> Result<NcclComm> {
        let backend = |reason: String| Error::Backend {
            backend: "nccl",
            reason: format!("rank {rank}: {reason}"),
        };
        let id = unique_id(store, rank, nccl)?;
        gpu.make_current().map_err(backend)?;
        let mut comm: Handle = std::ptr::null_mut();
        // SAFETY: `comm` is an out-pointer; `id` is the job's id; rank < world_size.
        let rc =
            unsafe { (nccl.ncclCommInitRank)(&mut comm, world_size as c_int, id, rank as c_int) };
        nccl.check("ncclCommInitRank", rc).map_err(backend)?;
        let mut stream: Handle = std::ptr::null_mut();
        // Non-blocking: the legacy default stream (used by other libraries) need not wait for it.
        // SAFETY: an out-pointer, under the current context.
        let rc = unsafe { (driver.cuStreamCreate)(&mut stream, 1) };
        driver.check("cuStreamCreate", rc).map_err(backend)?;
        tracing::info!(
            rank,
            world_size,
            backend = "nccl",
            gpu = %gpu.name,
            device = gpu.index,
            library = %nccl.path,
            driver = %driver.version(),
            version = %nccl.version(),
            nccl_debug = %std::env::var("NCCL_DEBUG").unwrap_or_default(),
            nccl_socket_ifname = %std::env::var("NCCL_SOCKET_IFNAME").unwrap_or_default(),
            "phalanx: init (allreduce, broadcast, allgather, reduce_scatter, barrier run in NCCL)"
        );
        Ok(NcclComm {
            nccl,
            driver,
            gpu,
            comm,
            stream,
            rank,
            world_size,
            scratch: None,
            timeout: Timeout::from_env()?,
            abort,
            native,
        })
    }

    fn fail(&self, call: &'static str, reason: String) -> phalanx_transport::Error {
        phalanx_transport::Error::Io {
            op: call,
            peer: self.rank,
            source: std::io::Error::other(format!("NCCL on GPU {}: {reason}", self.gpu.index)),
        }
    }

    fn cuda(&self, call: &'static str, rc: c_int) -> phalanx_transport::Result<()> {
        self.driver
            .check(call, rc)
            .map_err(|reason| self.fail(call, reason))
    }

    fn nccl(&self, call: &'static str, rc: c_int) -> phalanx_transport::Result<()> {
        self.nccl
            .check(call, rc)
            .map_err(|reason| self.fail(call, reason))
    }

    /// Makes this rank's GPU context current on the calling thread.
    fn make_current(&self) -> phalanx_transport::Result<()> {
        self.gpu
            .make_current()
            .map_err(|r| self.fail("cuCtxSetCurrent", r))
    }

    /// The staging buffer, at least `bytes` long.
    fn scratch(&mut self, bytes: usize) -> phalanx_transport::Result<DevicePtr> {
        self.make_current()?;
        if self.scratch.as_ref().is_none_or(|s| s.bytes < bytes) {
            self.scratch = None;
            let b =
                DeviceBuffer::new(self.driver, bytes).map_err(|r| self.fail("cuMemAlloc", r))?;
            self.scratch = Some(b);
        }
        Ok(self.scratch.as_ref().map(|s| s.ptr).unwrap_or_default())
    }

    fn upload(&self, dst: DevicePtr, src: &[u8]) -> phalanx_transport::Result<()> {
        // SAFETY: `dst` has room for `src` (scratch sized by the caller); the copy completes
        // before `src` can change (every collective waits for its stream).
        let rc = unsafe {
            (self.driver.cuMemcpyHtoDAsync_v2)(dst, src.as_ptr().cast(), src.len(), self.stream)
        };
        self.cuda("cuMemcpyHtoDAsync", rc)
    }

    fn download(&self, dst: &mut [u8], src: DevicePtr) -> phalanx_transport::Result<()> {
        // SAFETY: as in `upload`, the other way round.
        let rc = unsafe {
            (self.driver.cuMemcpyDtoHAsync_v2)(dst.as_mut_ptr().cast(), src, dst.len(), self.stream)
        };
        self.cuda("cuMemcpyDtoHAsync", rc)
    }

    /// Waits for the stream, watching NCCL's asynchronous errors, the group's abort and
    /// `PHALANX_TIMEOUT`; on any of them the communicator is aborted.
    fn wait(&mut self, during: &'static str) -> phalanx_transport::Result<()> {
        let start = Instant::now();
        let mut nap = Duration::from_micros(1);
        loop {
            // SAFETY: the group's stream.
            let rc = unsafe { (self.driver.cuStreamQuery)(self.stream) };
            if rc == 0 {
                return Ok(());
            }
            if rc != CUDA_ERROR_NOT_READY {
                return self.cuda("cuStreamQuery", rc);
            }
            let mut async_rc: c_int = 0;
            // SAFETY: the live communicator and an out-pointer.
            unsafe { (self.nccl.ncclCommGetAsyncError)(self.comm, &mut async_rc) };
            let why = if async_rc != 0 && async_rc != sys::NCCL_IN_PROGRESS {
                Some(format!("{during}: {}", self.nccl.error(async_rc)))
            } else if let Some(r) = self.abort.reason() {
                Some(format!("aborted: {r}"))
            } else if start.elapsed() > self.timeout {
                Some(format!(
                    "{during} did not complete within {:?} (PHALANX_TIMEOUT)",
                    self.timeout
                ))
            } else {
                None
            };
            if let Some(why) = why {
                // SAFETY: aborting the live communicator ends its kernels; it is not used again
                // (the group has failed).
                unsafe { (self.nccl.ncclCommAbort)(self.comm) };
                self.comm = std::ptr::null_mut();
                return Err(self.fail(during, why));
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }

    // === Device buffers (Note [NCCL buffers]) ===

    /// Allreduce of `count` elements of `dtype` at `buf`, in place, on the group's stream.
    ///
    /// # Safety
    /// `buf` holds `count` elements of `dtype` in this rank's GPU memory.
    pub(crate) unsafe fn allreduce_device(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
    ) -> phalanx_transport::Result<()> {
        self.allreduce_device_code(buf, count, dtype, nccl_op(op))
    }

    /// [`NcclComm::allreduce_device`] with NCCL's own `ncclRedOp_t` (`ncclAvg` for the
    /// device-buffer API, which divides on the GPU).
    ///
    /// # Safety
    /// As [`NcclComm::allreduce_device`].
    unsafe fn allreduce_device_code(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        op: c_int,
    ) -> phalanx_transport::Result<()> {
        let p = buf as *mut c_void;
        let rc =
            (self.nccl.ncclAllReduce)(p, p, count, nccl_type(dtype), op, self.comm, self.stream);
        self.nccl("ncclAllReduce", rc)
    }

    /// Broadcast of `count` elements from `root`, in place.
    ///
    /// # Safety
    /// As [`NcclComm::allreduce_device`].
    unsafe fn broadcast_device(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        root: usize,
    ) -> phalanx_transport::Result<()> {
        let p = buf as *mut c_void;
        let rc = (self.nccl.ncclBroadcast)(
            p,
            p,
            count,
            nccl_type(dtype),
            root as c_int,
            self.comm,
            self.stream,
        );
        self.nccl("ncclBroadcast", rc)
    }

    /// `ProcessGroup::allreduce_device`: the allreduce of GPU memory in place, waited for;
    /// `Avg` divides on the device (`ncclAvg`).
    ///
    /// # Safety
    /// As `ProcessGroup::allreduce_device`.
    pub(crate) unsafe fn allreduce_in_place(&mut self, buf: DeviceSlice, op: ReduceOp) -> Ran {
        let code = if op == ReduceOp::Avg {
            NCCL_AVG
        } else {
            nccl_op(op)
        };
        self.make_current()?;
        // SAFETY: the caller's contract.
        unsafe { self.allreduce_device_code(buf.ptr, buf.len, buf.dtype, code)? };
        self.wait("ncclAllReduce")?;
        Ok(Algorithm::Direct)
    }

    /// `ProcessGroup::broadcast_device`: the broadcast of GPU memory in place, waited for.
    ///
    /// # Safety
    /// As `ProcessGroup::broadcast_device`.
    pub(crate) unsafe fn broadcast_in_place(&mut self, buf: DeviceSlice, root: usize) -> Ran {
        self.make_current()?;
        // SAFETY: the caller's contract.
        unsafe { self.broadcast_device(buf.ptr, buf.len, buf.dtype, root)? };
        self.wait("ncclBroadcast")?;
        Ok(Algorithm::Direct)
    }

    /// Allgather: `count` elements from `send` of every rank into `recv` (`count × world_size`).
    ///
    /// # Safety
    /// `send` and `recv` hold `count` and `count × world_size` elements in GPU memory.
    pub(crate) unsafe fn allgather_device(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DType,
    ) -> phalanx_transport::Result<()> {
        let rc = (self.nccl.ncclAllGather)(
            send as *const c_void,
            recv as *mut c_void,
            count,
            nccl_type(dtype),
            self.comm,
            self.stream,
        );
        self.nccl("ncclAllGather", rc)
    }

    /// Reduce-scatter: `send` (`count × world_size`) reduced, this rank's `count` into `recv`.
    ///
    /// # Safety
    /// As [`NcclComm::allgather_device`], the other way round.
    pub(crate) unsafe fn reduce_scatter_device(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
    ) -> phalanx_transport::Result<()> {
        let rc = (self.nccl.ncclReduceScatter)(
            send as *const c_void,
            recv as *mut c_void,
            count,
            nccl_type(dtype),
            nccl_op(op),
            self.comm,
            self.stream,
        );
        self.nccl("ncclReduceScatter", rc)
    }
}

/// Host slices, staged through the GPU (Note [NCCL buffers]); NCCL picks its algorithms.
impl Backend for NcclComm {
    fn name(&self) -> &'static str {
        "nccl"
    }

    fn describe(&self, _algo: Algorithm) -> String {
        "NCCL".to_string()
    }

    fn allreduce<T: Element>(
        &mut self,
        _seq: u64,
        buf: &mut [T],
        op: ReduceOp,
        _opts: &Options,
    ) -> Ran {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let dev = self.scratch(bytes.len())?;
        self.upload(dev, bytes)?;
        // SAFETY: `dev` holds `buf.len()` elements of T.
        unsafe { self.allreduce_device(dev, bytes.len() / size_of::<T>(), T::DTYPE, op)? };
        self.download(bytes, dev)?;
        self.wait("ncclAllReduce")?;
        if op == ReduceOp::Avg {
            for v in buf.iter_mut() {
                *v = v.div_world(self.world_size);
            }
        }
        Ok(Algorithm::Direct)
    }

    fn broadcast<T: Element>(
        &mut self,
        _seq: u64,
        buf: &mut [T],
        root: usize,
        _opts: &Options,
    ) -> Ran {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let dev = self.scratch(bytes.len())?;
        self.upload(dev, bytes)?;
        // SAFETY: `dev` holds `buf.len()` elements of T.
        unsafe { self.broadcast_device(dev, bytes.len() / size_of::<T>(), T::DTYPE, root)? };
        self.download(bytes, dev)?;
        self.wait("ncclBroadcast")?;
        Ok(Algorithm::Direct)
    }

    fn allgather<T: Element>(
        &mut self,
        _seq: u64,
        send: &[T],
        recv: &mut [T],
        _opts: &Options,
    ) -> Ran {
        let (s, r): (&[u8], &mut [u8]) =
            (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        // One allocation: the gathered buffer, then this rank's part.
        let dev = self.scratch(r.len() + s.len())?;
        let dev_send = dev + r.len() as u64;
        self.upload(dev_send, s)?;
        // SAFETY: `dev` holds recv.len() elements, `dev_send` send.len() elements of T.
        unsafe { self.allgather_device(dev_send, dev, send.len(), T::DTYPE)? };
        self.download(r, dev)?;
        self.wait("ncclAllGather")?;
        Ok(Algorithm::Direct)
    }

    fn reduce_scatter<T: Element>(
        &mut self,
        _seq: u64,
        send: &mut [T],
        recv: &mut [T],
        op: ReduceOp,
        _opts: &Options,
    ) -> Ran {
        let count = recv.len();
        let (s, r): (&[u8], &mut [u8]) =
            (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        let dev = self.scratch(s.len() + r.len())?;
        let dev_recv = dev + s.len() as u64;
        self.upload(dev, s)?;
        // SAFETY: `dev` holds send.len(), `dev_recv` `count` elements of T.
        unsafe { self.reduce_scatter_device(dev, dev_recv, count, T::DTYPE, op)? };
        self.download(r, dev_recv)?;
        self.wait("ncclReduceScatter")?;
        if op == ReduceOp::Avg {
            for v in recv.iter_mut() {
                *v = v.div_world(self.world_size);
            }
        }
        Ok(Algorithm::Direct)
    }

    /// A one-element allreduce: returns once every rank has entered it.
    fn barrier(&mut self, seq: u64) -> Ran {
        self.allreduce(seq, &mut [0u8], ReduceOp::Sum, &Options::default())
    }

    /// Point-to-point traffic goes over the native mesh (tags and all).
    fn send<T: Element>(&mut self, buf: &[T], peer: usize, tag: u32) -> Ran {
        self.native
            .send_bytes(bytemuck::cast_slice(buf), peer, tag)
            .map(|()| Algorithm::Direct)
            .map_err(|e| self.fail("send", e.to_string()))
    }

    fn recv<T: Element>(&mut self, buf: &mut [T], peer: usize, tag: u32) -> Ran {
        self.native
            .recv_bytes(bytemuck::cast_slice_mut(buf), peer, tag)
            .map(|()| Algorithm::Direct)
            .map_err(|e| self.fail("recv", e.to_string()))
    }

    /// A point-to-point batch, over the native mesh like send/recv (as bytes, copied back
    /// into the receives' buffers).
    fn send_recv_batch<T: Element>(&mut self, ops: &mut [P2POp<T>]) -> Ran {
        let bytes = ops
            .iter()
            .map(|op| match op {
                P2POp::Send { buf, peer, tag } => P2POp::Send {
                    buf: bytemuck::cast_slice(buf).to_vec(),
                    peer: *peer,
                    tag: *tag,
                },
                P2POp::Recv { buf, peer, tag } => P2POp::Recv {
                    buf: vec![0u8; std::mem::size_of_val(&buf[..])],
                    peer: *peer,
                    tag: *tag,
                },
            })
            .collect();
        let done = self
            .native
            .batch_bytes(bytes)
            .map_err(|e| self.fail("batch_isend_irecv", e.to_string()))?;
        for (op, d) in ops.iter_mut().zip(done) {
            if let (P2POp::Recv { buf, .. }, P2POp::Recv { buf: got, .. }) = (op, d) {
                bytemuck::cast_slice_mut(buf).copy_from_slice(&got);
            }
        }
        Ok(Algorithm::Direct)
    }

    /// Aborts the communicator and the native group (whose store publishes the cause).
    fn abort(&mut self, _rank: usize, cause: &str) {
        self.abort.abort(cause);
        if !self.comm.is_null() {
            // SAFETY: the live communicator; it is not used after the group failed.
            unsafe { (self.nccl.ncclCommAbort)(self.comm) };
        }
        self.comm = std::ptr::null_mut();
        self.native.abort(cause);
    }
}

/// Rank 0 creates the id and sets it; every other rank waits for the key and reads it: one
/// set, or one wait and one get, per rank.
fn unique_id(store: &dyn Store, rank: usize, nccl: &Nccl) -> Result<UniqueId> {
    let store_err = |source| Error::Store { rank, source };
    if rank == 0 {
        let mut id = UniqueId([0; 128]);
        // SAFETY: an out-pointer to 128 bytes.
        let rc = unsafe { (nccl.ncclGetUniqueId)(&mut id) };
        nccl.check("ncclGetUniqueId", rc)
            .map_err(|reason| Error::Backend {
                backend: "nccl",
                reason: format!("rank 0: {reason}"),
            })?;
        store.set(UNIQUE_ID_KEY, &id.0).map_err(store_err)?;
        Ok(id)
    } else {
        store.wait(&[UNIQUE_ID_KEY]).map_err(store_err)?;
        let bytes = store.get(UNIQUE_ID_KEY).map_err(store_err)?;
        let id: [u8; 128] = bytes.as_slice().try_into().map_err(|_| Error::Backend {
            backend: "nccl",
            reason: format!(
                "rank {rank}: store key {UNIQUE_ID_KEY} holds {} bytes, not NCCL's 128",
                bytes.len()
            ),
        })?;
        Ok(UniqueId(id))
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        let _ = self.gpu.make_current();
        self.scratch = None;
        // SAFETY: nothing is pending (every collective waited); the handles are ours.
        unsafe {
            if !self.comm.is_null() {
                (self.nccl.ncclCommDestroy)(self.comm);
            }
            (self.driver.cuStreamDestroy_v2)(self.stream);
        }
    }
}
