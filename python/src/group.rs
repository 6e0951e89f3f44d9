//! `Group`: one phalanx process group, driven from Python on tensors' memory in place.
//!
//! Python (`phalanx_torch/__init__.py`) checks every tensor (CPU, contiguous, a dtype phalanx
//! has) and passes its data pointer, element count and dtype name; here the pointer becomes a
//! slice for the length of the call, with the GIL released, so other Python threads run while
//! the collective does. A failure (a peer that died, a mismatched collective, a timeout) is a
//! `PhalanxError` carrying phalanx's sentence, which names the culprit rank.

use std::sync::Arc;
use std::time::Duration;

use half::{bf16, f16};
use phalanx_core::{DType, ReduceOp};
use phalanx_pg::{P2POp, Placement, ProcessGroup};
use phalanx_store::Auth;
use pyo3::prelude::*;

use crate::py_store::PyStore;
use crate::PhalanxError;

/// Runs `$body` with `$T` the Rust element type of `$dtype`.
macro_rules! typed {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F64 => {
                type $T = f64;
                $body
            }
            DType::BF16 => {
                type $T = bf16;
                $body
            }
            DType::F16 => {
                type $T = f16;
                $body
            }
            DType::I32 => {
                type $T = i32;
                $body
            }
            DType::I64 => {
                type $T = i64;
                $body
            }
            DType::U8 => {
                type $T = u8;
                $body
            }
        }
    };
}

/// The elements at `ptr` as a slice.
///
/// # Safety
/// `ptr` is the data pointer of a live, contiguous CPU tensor of `n` elements of `T` that
/// nothing else writes during the call (phalanx_torch checks all of it and holds the tensor).
unsafe fn slice<'a, T>(ptr: usize, n: usize) -> &'a [T] {
    if n == 0 {
        return &[];
    }
    std::slice::from_raw_parts(ptr as *const T, n)
}

/// [`slice`], writable.
///
/// # Safety
/// As for [`slice`], and no other slice of these elements is alive during the call.
unsafe fn slice_mut<'a, T>(ptr: usize, n: usize) -> &'a mut [T] {
    if n == 0 {
        return &mut [];
    }
    std::slice::from_raw_parts_mut(ptr as *mut T, n)
}

fn dtype(name: &str) -> PyResult<DType> {
    name.parse()
        .map_err(|e: phalanx_core::Error| PhalanxError::new_err(e.to_string()))
}

fn reduce_op(name: &str) -> PyResult<ReduceOp> {
    name.parse()
        .map_err(|e: phalanx_core::Error| PhalanxError::new_err(e.to_string()))
}

fn err(e: phalanx_pg::Error) -> PyErr {
    PhalanxError::new_err(e.to_string())
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A phalanx process group (the native side of `phalanx_torch.PhalanxBackend`).
#[pyclass(frozen, module = "phalanx_torch._native")]
pub(crate) struct Group {
    pg: Arc<ProcessGroup>,
    timeout: Duration,
}

impl Group {
    /// A group connected on the Rust side (a fault-tolerance generation: `fault_tolerance.rs`),
    /// its waits bounded by `timeout` as the launcher's `PHALANX_TIMEOUT` bounds them.
    pub(crate) fn connected(pg: ProcessGroup, timeout: Duration) -> Group {
        Group {
            pg: Arc::new(pg),
            timeout,
        }
    }

    pub(crate) fn process_group(&self) -> &ProcessGroup {
        &self.pg
    }

    /// Runs `f` on the group with the GIL released, so other Python threads run meanwhile; a
    /// failure becomes a `PhalanxError` carrying phalanx's sentence.
    fn detached<F>(&self, py: Python<'_>, f: F) -> PyResult<()>
    where
        F: FnOnce(&ProcessGroup) -> phalanx_pg::Result<()> + Send,
    {
        let pg = &self.pg;
        py.detach(|| f(pg)).map_err(err)
    }

    /// Elements of a root-only buffer on this rank: `world_size × n` on the root, else none.
    fn at_root(&self, root: usize, n: usize) -> usize {
        if self.pg.rank() == root {
            n * self.pg.world_size()
        } else {
            0
        }
    }
}

#[pymethods]
impl Group {
    /// Connects rank `rank` of `world_size` through `store` (PyTorch's, as handed to the
    /// backend factory). `timeout_s` bounds every collective (`PHALANX_TIMEOUT` wins when set).
    /// `subgroup`: the group is not the job's ranks in the job's order (`new_group`,
    /// `split_group`, a DeviceMesh dimension), so the launcher's local ranks do not apply.
    #[new]
    #[pyo3(signature = (store, rank, world_size, timeout_s, subgroup = false))]
    fn new(
        py: Python<'_>,
        store: Py<PyAny>,
        rank: usize,
        world_size: usize,
        timeout_s: f64,
        subgroup: bool,
    ) -> PyResult<Group> {
        let timeout = match var("PHALANX_TIMEOUT") {
            Some(_) => phalanx_core::Timeout::from_env()
                .map_err(|e| PhalanxError::new_err(e.to_string()))?,
            None => Duration::from_secs_f64(timeout_s.max(0.001)),
        };
        let num = |k: &str, default: usize| var(k).and_then(|v| v.parse().ok()).unwrap_or(default);
        // A subgroup has no launcher variables of its own.
        let whole_job = !subgroup && num("WORLD_SIZE", world_size) == world_size;
        let placement = Placement {
            rank,
            world_size,
            local_rank: if whole_job {
                num("LOCAL_RANK", rank)
            } else {
                rank
            },
            local_world_size: if whole_job {
                num("LOCAL_WORLD_SIZE", world_size)
            } else {
                world_size
            },
            node_rank: num("GROUP_RANK", 0),
        };
        // The interface: phalanx's variable, else the ones PyTorch users already set, each
        // in its own syntax (Note [Borrowed variables] in phalanx-core).
        let ifname = phalanx_core::env::socket_ifname();
        let master = var("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into());
        let sel = phalanx_transport::ifname::select_from(ifname.as_ref(), &master)
            .map_err(|e| PhalanxError::new_err(format!("rank {rank}: {e}")))?;
        let opts = phalanx_pg::collective_options().map_err(err)?;
        let auth = Auth::from_env();
        let store = Arc::new(PyStore::new(store, timeout));
        let pg = py
            .detach(|| phalanx_pg::connect(placement, store, None, &auth, timeout, sel.ip, opts))
            .map_err(err)?;
        Ok(Group {
            pg: Arc::new(pg),
            timeout,
        })
    }

    /// Starts the group's background progress (Note [Background progress] in
    /// phalanx-transport): every send to this rank completes whatever the rank does, so that
    /// sends need not be held (Note [Deferred point-to-point] in `_p2p.py`).
    fn start_progress(&self, py: Python<'_>) -> PyResult<()> {
        self.detached(py, |pg| pg.start_progress())
    }

    /// Seconds every wait of this group is bounded by (`PHALANX_TIMEOUT`, else the one given).
    #[getter]
    fn timeout_s(&self) -> f64 {
        self.timeout.as_secs_f64()
    }

    #[getter]
    fn rank(&self) -> usize {
        self.pg.rank()
    }

    #[getter]
    fn world_size(&self) -> usize {
        self.pg.world_size()
    }

    /// Why this group failed (its first failure's root cause, naming the rank), or `None`
    /// while it works: after a failure every collective raises.
    #[getter]
    fn failure(&self) -> Option<String> {
        self.pg.failure()
    }

    /// Whether ranks on this host exchange through shared memory.
    #[getter]
    fn uses_shared_memory(&self) -> bool {
        self.pg.uses_shared_memory()
    }

    fn allreduce(&self, py: Python<'_>, ptr: usize, n: usize, dt: &str, op: &str) -> PyResult<()> {
        let (dt, op) = (dtype(dt)?, reduce_op(op)?);
        // SAFETY: see `slice`; Python holds the tensor for the call.
        self.detached(
            py,
            |pg| typed!(dt, T => pg.allreduce(unsafe { slice_mut::<T>(ptr, n) }, op)),
        )
    }

    /// The data-movement collectives take bytes: PyTorch's tensors of any dtype, as raw memory.
    fn broadcast(&self, py: Python<'_>, ptr: usize, nbytes: usize, root: usize) -> PyResult<()> {
        // SAFETY: see `slice`.
        self.detached(py, |pg| {
            pg.broadcast(unsafe { slice_mut::<u8>(ptr, nbytes) }, root)
        })
    }

    /// `recv` holds `world_size × nbytes`, rank r's `send` at block r.
    fn allgather(&self, py: Python<'_>, send: usize, recv: usize, nbytes: usize) -> PyResult<()> {
        let world = self.pg.world_size();
        // SAFETY: see `slice`; send and recv do not overlap (Python copies an overlapping input).
        self.detached(py, |pg| {
            pg.allgather(unsafe { slice::<u8>(send, nbytes) }, unsafe {
                slice_mut::<u8>(recv, nbytes * world)
            })
        })
    }

    /// Blocks of different sizes, in bytes: rank p's `send` (`counts[p]` bytes) lands at
    /// `counts[..p].sum()` in every rank's `recv`.
    fn allgather_v(
        &self,
        py: Python<'_>,
        send: usize,
        recv: usize,
        counts: Vec<usize>,
    ) -> PyResult<()> {
        let mine = counts.get(self.pg.rank()).copied().unwrap_or(0);
        let total = counts.iter().sum();
        // SAFETY: see `slice`; send and recv do not overlap (Python copies an overlapping input).
        self.detached(py, |pg| {
            pg.allgather_v(
                unsafe { slice::<u8>(send, mine) },
                unsafe { slice_mut::<u8>(recv, total) },
                &counts,
            )
        })
    }

    /// `send` holds `world_size × n` elements; block `rank` of their reduction lands in `recv`.
    /// phalanx reduces in place, so `send` is copied first: the caller's input is left as it was.
    fn reduce_scatter(
        &self,
        py: Python<'_>,
        send: usize,
        recv: usize,
        n: usize,
        dt: &str,
        op: &str,
    ) -> PyResult<()> {
        let (dt, op) = (dtype(dt)?, reduce_op(op)?);
        let world = self.pg.world_size();
        // SAFETY: see `slice`.
        self.detached(py, |pg| {
            typed!(dt, T => {
                let mut scratch = unsafe { slice::<T>(send, n * world) }.to_vec();
                pg.reduce_scatter(&mut scratch, unsafe { slice_mut::<T>(recv, n) }, op)
            })
        })
    }

    /// Blocks of different sizes, in elements: block p of `send` (`counts[p]` elements, at
    /// `counts[..p].sum()`) is reduced over the ranks into rank p's `recv`. `send` is copied
    /// first, as for `reduce_scatter`.
    fn reduce_scatter_v(
        &self,
        py: Python<'_>,
        send: usize,
        recv: usize,
        counts: Vec<usize>,
        dt: &str,
        op: &str,
    ) -> PyResult<()> {
        let (dt, op) = (dtype(dt)?, reduce_op(op)?);
        let mine = counts.get(self.pg.rank()).copied().unwrap_or(0);
        let total = counts.iter().sum();
        // SAFETY: see `slice`.
        self.detached(py, |pg| {
            typed!(dt, T => {
                let mut scratch = unsafe { slice::<T>(send, total) }.to_vec();
                pg.reduce_scatter_v(&mut scratch, unsafe { slice_mut::<T>(recv, mine) }, &counts, op)
            })
        })
    }

    fn reduce(
        &self,
        py: Python<'_>,
        ptr: usize,
        n: usize,
        dt: &str,
        op: &str,
        root: usize,
    ) -> PyResult<()> {
        let (dt, op) = (dtype(dt)?, reduce_op(op)?);
        // SAFETY: see `slice`.
        self.detached(
            py,
            |pg| typed!(dt, T => pg.reduce(unsafe { slice_mut::<T>(ptr, n) }, op, root)),
        )
    }

    /// On the root, `recv` holds `world_size × nbytes` (nothing elsewhere).
    fn gather(
        &self,
        py: Python<'_>,
        send: usize,
        recv: usize,
        nbytes: usize,
        root: usize,
    ) -> PyResult<()> {
        let m = self.at_root(root, nbytes);
        // SAFETY: see `slice`.
        self.detached(py, |pg| {
            pg.gather(
                unsafe { slice::<u8>(send, nbytes) },
                unsafe { slice_mut::<u8>(recv, m) },
                root,
            )
        })
    }

    /// On the root, `send` holds `world_size × nbytes` (nothing elsewhere).
    fn scatter(
        &self,
        py: Python<'_>,
        send: usize,
        recv: usize,
        nbytes: usize,
        root: usize,
    ) -> PyResult<()> {
        let m = self.at_root(root, nbytes);
        // SAFETY: see `slice`.
        self.detached(py, |pg| {
            pg.scatter(
                unsafe { slice::<u8>(send, m) },
                unsafe { slice_mut::<u8>(recv, nbytes) },
                root,
            )
        })
    }

    /// Unequal splits, in bytes: `send_splits[p]` to rank p, `recv_splits[p]` from it.
    fn all_to_all_single(
        &self,
        py: Python<'_>,
        send: usize,
        send_splits: Vec<usize>,
        recv: usize,
        recv_splits: Vec<usize>,
    ) -> PyResult<()> {
        let (ns, nr) = (send_splits.iter().sum(), recv_splits.iter().sum());
        // SAFETY: see `slice`.
        self.detached(py, |pg| {
            pg.all_to_all_single(
                unsafe { slice::<u8>(send, ns) },
                &send_splits,
                unsafe { slice_mut::<u8>(recv, nr) },
                &recv_splits,
            )
        })
    }

    /// Point-to-point operations moved together, every direction at once (phalanx's
    /// `batch_isend_irecv`), so that crossing sends and receives never wait on each other.
    /// Each op is `(is_send, ptr, nbytes, peer, tag)`; bytes are copied in and out.
    fn p2p_batch(
        &self,
        py: Python<'_>,
        ops: Vec<(bool, usize, usize, usize, u32)>,
    ) -> PyResult<()> {
        self.detached(py, |pg| {
            let batch: Vec<P2POp<u8>> = ops
                .iter()
                .map(|&(is_send, ptr, n, peer, tag)| {
                    if is_send {
                        // SAFETY: see `slice`.
                        let buf = unsafe { slice::<u8>(ptr, n) }.to_vec();
                        P2POp::Send { buf, peer, tag }
                    } else {
                        P2POp::Recv {
                            buf: vec![0; n],
                            peer,
                            tag,
                        }
                    }
                })
                .collect();
            // On this thread, which waits for the batch with nothing else to do (the GIL is
            // released): handing it to the group's worker and back cost two thread wake-ups
            // per exchange, each as long as a small exchange (docs/collectives.md).
            let done = pg.batch_send_recv(batch)?;
            for (op, &(is_send, ptr, n, _, _)) in done.iter().zip(&ops) {
                if !is_send {
                    // SAFETY: see `slice_mut`.
                    unsafe { slice_mut::<u8>(ptr, n) }.copy_from_slice(op.buf());
                }
            }
            Ok(())
        })
    }

    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        self.detached(py, |pg| pg.barrier())
    }

    /// Fails every rank's pending and future collectives with `reason`.
    fn abort(&self, reason: &str) {
        self.pg.abort(reason);
    }
}
