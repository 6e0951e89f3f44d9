//! The NCCL backend: allreduce, broadcast, allgather and reduce_scatter by NCCL on this
//! rank's GPU (`--backend nccl`, cargo feature `nccl`; docs/gpu.md).
//!
//! Setup ([`init_nccl`]): NCCL and the CUDA driver are loaded at run time (Note [Finding NCCL]
//! in `nccl_sys.rs`); the GPU is `LOCAL_RANK` (NCCL puts one rank on one GPU); `PHALANX_DEBUG`
//! and `PHALANX_SOCKET_IFNAME` become `NCCL_DEBUG` and `NCCL_SOCKET_IFNAME` unless the user set
//! those; the native process group is created as usual (its store and TCP mesh); rank 0 calls
//! `ncclGetUniqueId` and sets the 128 bytes in the store, the other ranks wait for that one key
//! (one request each); then `ncclCommInitRank`.
//!
//! Note [NCCL buffers]: the [`ProcessGroup`] API takes host slices, so each collective copies
//! the slice into a device buffer of this rank's GPU, runs NCCL on it on the group's stream and
//! copies the result back: [`DeviceBuffer`] and the `*_device` methods of `NcclComm` are the
//! device-side path, the host-slice methods wrap them. The trainer's gradients reach the group
//! as host `f32` buckets (Note [Host-staged gradients] in `phalanx-ddp`), so with `--device cuda`
//! DDP buckets do NOT stay on the GPU yet: that needs Burn to hand out a tensor's device
//! pointer. send/recv and the failure protocol use the native mesh.
//!
//! What differs from the native backend:
//! - NCCL's reduction order, so results are not bitwise equal to the native backend's.
//!   `Avg` is `Sum` followed by the division on the host, as in the native backend.
//! - A wait polls the stream and `ncclCommGetAsyncError`; after `PHALANX_TIMEOUT` without
//!   completion, or when the group is aborted, the communicator is aborted (`ncclCommAbort`)
//!   and the collective fails.

use std::{
    ffi::{c_char, c_int, c_void},
    sync::Arc,
    time::{Duration, Instant},
};

use phalanx_collectives::{Algorithm, Options};
use phalanx_core::{env, DType, Element, ReduceOp, Timeout};
use phalanx_transport::AbortHandle;

use crate::{
    exec::Links,
    nccl_sys::{self, DevicePtr, Driver, Handle, Nccl, UniqueId, CUDA_ERROR_NOT_READY},
    Error, Placement, ProcessGroup, Result,
};

type Ran = phalanx_transport::Result<Algorithm>;

/// The store key of the NCCL unique id (under the round's prefix).
const UNIQUE_ID_KEY: &str = "nccl/unique_id";

/// Joins the job as the native backend does (store, TCP mesh), then creates an
/// NCCL communicator over every rank on GPU `LOCAL_RANK`. Fails fast, naming what is missing,
/// when NCCL, the CUDA driver or that GPU is not there.
///
/// ```no_run
/// // Under `phalanx launch --nproc-per-node 2` on a machine with 2 GPUs.
/// use phalanx_core::ReduceOp;
/// let pg = phalanx_pg::init_nccl().unwrap();
/// let mut x = [pg.rank() as f32 + 1.0];
/// pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
/// assert_eq!(x[0], 3.0);
/// ```
pub fn init_nccl() -> Result<ProcessGroup> {
    // Before NCCL's first call, which reads them.
    map_env();
    let dist = crate::DistEnv::from_env()?;
    let (nccl, driver) = libraries()?;
    let gpu = Gpu::open(driver, dist.local_rank)?;
    // The native group itself, not `init_process_group`, which follows PHALANX_BACKEND (=nccl).
    let native = crate::init_with(crate::InitOptions::from_env()?)?;
    let rank = native.rank();
    let world_size = native.world_size();
    let backend = |reason: String| Error::Backend {
        backend: "nccl",
        reason: format!("rank {rank}: {reason}"),
    };
    let id = unique_id(&native, nccl)?;
    gpu.make_current().map_err(backend)?;
    let mut comm: Handle = std::ptr::null_mut();
    // SAFETY: `comm` is an out-pointer; `id` is the job's id; rank < world_size.
    let rc = unsafe { (nccl.ncclCommInitRank)(&mut comm, world_size as c_int, id, rank as c_int) };
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
    let placement = Placement {
        rank,
        world_size,
        local_rank: native.local_rank(),
        local_world_size: native.local_world_size(),
        node_rank: dist.group_rank,
    };
    let abort = AbortHandle::default();
    let store = native.store().clone();
    let comm = NcclComm {
        nccl,
        driver,
        gpu,
        comm,
        stream,
        rank,
        world_size,
        scratch: None,
        timeout: Timeout::from_env()?,
        abort: abort.clone(),
        native: Arc::new(native),
    };
    Ok(ProcessGroup::with_links(
        placement,
        Links::Nccl(Box::new(comm)),
        abort,
        None,
        store,
        None,
        Options::default(),
    ))
}

/// What `--backend nccl` would use on this machine — `libnccl.so.2 (NCCL 2.27.3), CUDA 13.0,
/// 1 GPU(s)` — or an error naming everything missing (NCCL, the driver, a GPU). Loads the
/// libraries but creates no communicator; `phalanx` calls it before starting ranks.
///
/// ```
/// match phalanx_pg::nccl_probe() {
///     Ok(found) => assert!(found.contains("NCCL")),
///     Err(e) => assert!(e.to_string().contains("nccl")),
/// }
/// ```
pub fn nccl_probe() -> Result<String> {
    let (nccl, driver) = libraries()?;
    let mut n: c_int = 0;
    // SAFETY: an out-pointer.
    let rc = unsafe { (driver.cuDeviceGetCount)(&mut n) };
    if rc != 0 || n <= 0 {
        return Err(Error::Backend {
            backend: "nccl",
            reason: format!("the CUDA driver ({}) sees no GPU", driver.version()),
        });
    }
    Ok(format!(
        "{} (NCCL {}), {}, {n} GPU(s)",
        nccl.path,
        nccl.version(),
        driver.version()
    ))
}

/// NCCL and the driver, or one error naming everything missing.
fn libraries() -> Result<(&'static Nccl, &'static Driver)> {
    match (nccl_sys::nccl(), nccl_sys::driver()) {
        (Ok(n), Ok(d)) => Ok((n, d)),
        (n, d) => Err(Error::Backend {
            backend: "nccl",
            reason: [n.err(), d.err()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("; "),
        }),
    }
}

/// Note [NCCL variables]: users of torchrun set `NCCL_DEBUG` and `NCCL_SOCKET_IFNAME`; phalanx
/// users set `PHALANX_DEBUG` and `PHALANX_SOCKET_IFNAME` (same syntax). The phalanx ones are
/// copied onto the NCCL ones only when those are unset, before NCCL reads them (at its first
/// call), so a user's NCCL setting always wins.
fn map_env() {
    for (name, value) in nccl_env(&|k| std::env::var(k).ok().filter(|v| !v.is_empty())) {
        // Before any NCCL thread exists; phalanx's own threads do not read the environment.
        std::env::set_var(name, value);
    }
}

/// The NCCL variables to set, from a lookup of the environment.
fn nccl_env(get: &dyn Fn(&str) -> Option<String>) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if get("NCCL_DEBUG").is_none() {
        let level = get(env::PHALANX_DEBUG.name).map(|v| v.to_ascii_uppercase());
        match level.as_deref() {
            Some("INFO" | "DEBUG") => out.push(("NCCL_DEBUG", "INFO".to_string())),
            Some("TRACE") => out.push(("NCCL_DEBUG", "TRACE".to_string())),
            Some("WARN" | "ERROR") => out.push(("NCCL_DEBUG", "WARN".to_string())),
            _ => {}
        }
    }
    if get("NCCL_SOCKET_IFNAME").is_none() {
        if let Some(v) = get(env::PHALANX_SOCKET_IFNAME.name) {
            out.push(("NCCL_SOCKET_IFNAME", v));
        }
    }
    out
}

/// Rank 0 creates the id and sets it; every other rank waits for the key and reads it: one
/// set, or one wait and one get, per rank.
fn unique_id(pg: &ProcessGroup, nccl: &Nccl) -> Result<UniqueId> {
    let rank = pg.rank();
    let store_err = |source| Error::Store { rank, source };
    let store = pg.store();
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

/// This rank's GPU and its primary context (the one Burn's CUDA backend also uses).
pub(crate) struct Gpu {
    driver: &'static Driver,
    index: usize,
    ctx: Handle,
    name: String,
}

impl Gpu {
    fn open(driver: &'static Driver, index: usize) -> Result<Gpu> {
        let fail = |reason: String| Error::Backend {
            backend: "nccl",
            reason,
        };
        let mut n: c_int = 0;
        // SAFETY: an out-pointer.
        let rc = unsafe { (driver.cuDeviceGetCount)(&mut n) };
        driver.check("cuDeviceGetCount", rc).map_err(fail)?;
        if index >= n as usize {
            return Err(fail(format!(
                "NCCL puts one rank on one GPU: LOCAL_RANK {index} needs GPU {index}, but the \
                 CUDA driver sees {n} GPU(s). Use at most {n} rank(s) per node, or --backend \
                 native for ranks that share a GPU (gradients then reduce on the host)"
            )));
        }
        let mut dev: c_int = 0;
        let mut ctx: Handle = std::ptr::null_mut();
        let mut name = [0 as c_char; 128];
        // SAFETY: out-pointers; `index` is below the device count.
        unsafe {
            driver
                .check(
                    "cuDeviceGet",
                    (driver.cuDeviceGet)(&mut dev, index as c_int),
                )
                .map_err(fail)?;
            driver
                .check(
                    "cuDevicePrimaryCtxRetain",
                    (driver.cuDevicePrimaryCtxRetain)(&mut ctx, dev),
                )
                .map_err(fail)?;
            (driver.cuDeviceGetName)(name.as_mut_ptr(), name.len() as c_int, dev);
        }
        // SAFETY: cuDeviceGetName wrote a NUL-terminated string into the zeroed array.
        let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(Gpu {
            driver,
            index,
            ctx,
            name,
        })
    }

    /// Makes the primary context current on the calling thread (collectives run on the
    /// caller's thread or the group's worker thread).
    fn make_current(&self) -> std::result::Result<(), String> {
        // SAFETY: a context retained for the process's lifetime.
        let rc = unsafe { (self.driver.cuCtxSetCurrent)(self.ctx) };
        self.driver.check("cuCtxSetCurrent", rc)
    }
}

/// A buffer in this rank's GPU memory (Note [NCCL buffers]).
pub(crate) struct DeviceBuffer {
    driver: &'static Driver,
    ptr: DevicePtr,
    bytes: usize,
}

impl DeviceBuffer {
    fn new(driver: &'static Driver, bytes: usize) -> std::result::Result<DeviceBuffer, String> {
        let mut ptr: DevicePtr = 0;
        // SAFETY: an out-pointer; at least one byte so that the pointer is valid.
        let rc = unsafe { (driver.cuMemAlloc_v2)(&mut ptr, bytes.max(1)) };
        driver
            .check("cuMemAlloc", rc)
            .map_err(|e| format!("{e} ({bytes} bytes)"))?;
        Ok(DeviceBuffer { driver, ptr, bytes })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc; no work on it is pending (every wait completes).
        unsafe { (self.driver.cuMemFree_v2)(self.ptr) };
    }
}

/// An NCCL communicator with its GPU, stream and staging buffer.
pub(crate) struct NcclComm {
    nccl: &'static Nccl,
    driver: &'static Driver,
    gpu: Gpu,
    comm: Handle,
    stream: Handle,
    rank: usize,
    world_size: usize,
    /// Device memory for host-slice collectives; grows to the largest one.
    scratch: Option<DeviceBuffer>,
    timeout: std::time::Duration,
    /// Set by the group's failure path; a wait that sees it aborts the communicator.
    abort: AbortHandle,
    /// The native group: store, mesh for send/recv, and the failure protocol.
    native: Arc<ProcessGroup>,
}

// SAFETY: the handles are used under the process group's `Exec` lock only, one thread at a
// time, after making the context current on that thread.
unsafe impl Send for NcclComm {}
unsafe impl Send for Gpu {}

/// NCCL's `ncclDataType_t` of a phalanx dtype.
fn nccl_type(d: DType) -> c_int {
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
fn nccl_op(op: ReduceOp) -> c_int {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => 0,
        ReduceOp::Product => 1,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
    }
}

impl NcclComm {
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

    /// The staging buffer, at least `bytes` long.
    fn scratch(&mut self, bytes: usize) -> phalanx_transport::Result<DevicePtr> {
        self.gpu
            .make_current()
            .map_err(|r| self.fail("cuCtxSetCurrent", r))?;
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
            let why = if async_rc != 0 && async_rc != nccl_sys::NCCL_IN_PROGRESS {
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
        let p = buf as *mut c_void;
        let rc = (self.nccl.ncclAllReduce)(
            p,
            p,
            count,
            nccl_type(dtype),
            nccl_op(op),
            self.comm,
            self.stream,
        );
        self.nccl("ncclAllReduce", rc)
    }

    /// Broadcast of `count` elements from `root`, in place.
    ///
    /// # Safety
    /// As [`NcclComm::allreduce_device`].
    pub(crate) unsafe fn broadcast_device(
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

    // === Host slices, staged through the GPU (what `Exec` calls) ===

    pub(crate) fn allreduce<T: Element>(&mut self, buf: &mut [T], op: ReduceOp) -> Ran {
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

    pub(crate) fn broadcast<T: Element>(&mut self, buf: &mut [T], root: usize) -> Ran {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let dev = self.scratch(bytes.len())?;
        self.upload(dev, bytes)?;
        // SAFETY: `dev` holds `buf.len()` elements of T.
        unsafe { self.broadcast_device(dev, bytes.len() / size_of::<T>(), T::DTYPE, root)? };
        self.download(bytes, dev)?;
        self.wait("ncclBroadcast")?;
        Ok(Algorithm::Direct)
    }

    pub(crate) fn allgather<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Ran {
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

    pub(crate) fn reduce_scatter<T: Element>(
        &mut self,
        send: &mut [T],
        recv: &mut [T],
        op: ReduceOp,
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
    pub(crate) fn barrier(&mut self) -> Ran {
        self.allreduce(&mut [0u8], ReduceOp::Sum)
    }

    /// Point-to-point traffic goes over the native mesh (tags and all).
    pub(crate) fn send<T: Element>(&mut self, buf: &[T], peer: usize, tag: u32) -> Ran {
        self.native
            .send(buf, peer, tag)
            .map(|()| Algorithm::Direct)
            .map_err(|e| self.fail("send", e.to_string()))
    }

    pub(crate) fn recv<T: Element>(&mut self, buf: &mut [T], peer: usize, tag: u32) -> Ran {
        self.native
            .recv(buf, peer, tag)
            .map(|()| Algorithm::Direct)
            .map_err(|e| self.fail("recv", e.to_string()))
    }

    /// Aborts the communicator and the native group (whose store publishes the cause).
    pub(crate) fn abort(&mut self, cause: &str) {
        self.abort.abort(cause);
        if !self.comm.is_null() {
            // SAFETY: the live communicator; it is not used after the group failed.
            unsafe { (self.nccl.ncclCommAbort)(self.comm) };
        }
        self.comm = std::ptr::null_mut();
        self.native.abort(cause);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn phalanx_variables_map_onto_unset_nccl_ones() {
        let got = nccl_env(&lookup(&[
            ("PHALANX_DEBUG", "info"),
            ("PHALANX_SOCKET_IFNAME", "^docker,lo"),
        ]));
        assert_eq!(
            got,
            vec![
                ("NCCL_DEBUG", "INFO".to_string()),
                ("NCCL_SOCKET_IFNAME", "^docker,lo".to_string())
            ]
        );
    }

    #[test]
    fn a_users_nccl_variables_win() {
        let got = nccl_env(&lookup(&[
            ("PHALANX_DEBUG", "INFO"),
            ("NCCL_DEBUG", "WARN"),
            ("PHALANX_SOCKET_IFNAME", "eth1"),
            ("NCCL_SOCKET_IFNAME", "ib0"),
        ]));
        assert!(got.is_empty(), "{got:?}");
        assert!(nccl_env(&lookup(&[])).is_empty());
    }

    #[test]
    fn every_dtype_and_op_has_an_nccl_code() {
        let types: Vec<c_int> = [
            DType::U8,
            DType::I32,
            DType::I64,
            DType::F16,
            DType::F32,
            DType::F64,
            DType::BF16,
        ]
        .into_iter()
        .map(nccl_type)
        .collect();
        assert_eq!(types, [1, 2, 4, 6, 7, 8, 9]);
        assert_eq!(nccl_op(ReduceOp::Avg), nccl_op(ReduceOp::Sum));
        assert_eq!(nccl_op(ReduceOp::Min), 3);
    }
}
