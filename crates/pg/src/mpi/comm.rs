//! The MPI world of this process and its collectives: each one call of the MPI library on
//! `MPI_COMM_WORLD`, with the mapping of `types.rs`.

use std::os::raw::{c_int, c_void};

use mpi::{environment::Universe, ffi, topology::Communicator, Threading};
use phalanx_collectives::{Algorithm, Options};
use phalanx_core::{Element, ReduceOp};

use super::types::{
    bytes_type, message_chunks, reduce_op, reduce_type, too_large, world, MAX_COUNT,
};
use crate::{
    backend::{Backend, Ran},
    placement::Placement,
    Error, Result,
};

/// The MPI world of this process; dropping it finalises MPI.
pub(crate) struct MpiComm {
    rank: usize,
    world_size: usize,
    /// The library's `MPI_IN_PLACE` (Note [MPI_IN_PLACE value]); `None`: reduce from a copy.
    in_place: Option<usize>,
    /// Send buffer when in place is unknown.
    scratch: Vec<u8>,
    /// Declared last: dropped after everything above, it calls `MPI_Finalize`.
    _universe: Universe,
}

impl MpiComm {
    /// Initialises MPI in this process (`MPI_THREAD_SERIALIZED`) and returns the world with
    /// this rank's place in it: rank and size from `MPI_COMM_WORLD`, ranks on this host from
    /// `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`.
    pub(crate) fn init() -> Result<(MpiComm, Placement)> {
        let (universe, threading) = mpi::initialize_with_threading(Threading::Serialized)
            .ok_or_else(|| Error::Backend {
                backend: "mpi",
                reason:
                    "MPI is already initialised in this process (one MPI process group per process)"
                        .into(),
            })?;
        if threading < Threading::Serialized {
            return Err(Error::Backend {
                backend: "mpi",
                reason: format!(
                    "the MPI library offers only {threading:?} threading; phalanx calls MPI from \
                     its worker thread and needs MPI_THREAD_SERIALIZED or higher"
                ),
            });
        }
        let world = universe.world();
        let (rank, world_size) = (world.rank() as usize, world.size() as usize);
        let (local_rank, local_world_size) = {
            let local = world.split_shared(world.rank());
            (local.rank() as usize, local.size() as usize)
        };
        let library = mpi::environment::library_version().unwrap_or_default();
        let library = library
            .lines()
            .next()
            .unwrap_or("unknown")
            .trim()
            .to_string();
        let in_place = in_place_sentinel(&library);
        tracing::info!(
            rank,
            world_size,
            local_rank,
            local_world_size,
            backend = "mpi",
            threading = ?threading,
            %library,
            in_place = in_place.is_some(),
            "phalanx: init (every collective runs in the MPI library)"
        );
        let placement = Placement {
            rank,
            world_size,
            local_rank,
            local_world_size,
            node_rank: rank / local_world_size.max(1),
        };
        let comm = MpiComm {
            rank,
            world_size,
            in_place,
            scratch: Vec::new(),
            _universe: universe,
        };
        Ok((comm, placement))
    }

    /// `MPI_Abort` on the world: `mpirun` ends every rank. Does not return. An associated
    /// function: the failure path calls it without the `Exec` lock that holds the comm.
    pub(crate) fn abort_job(rank: usize, cause: &str) {
        let who = if cause.starts_with("rank ") {
            String::new()
        } else {
            format!("rank {rank}: ")
        };
        eprintln!("phalanx: {who}{cause}; calling MPI_Abort so that every rank stops");
        // SAFETY: MPI is initialised while a group exists; MPI_Abort takes no Rust memory.
        unsafe {
            ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 1);
        }
    }

    /// `MPI_Allreduce` of `len` elements of `size` bytes at `ptr`, in chunks of `MAX_COUNT`.
    fn allreduce_raw(
        &mut self,
        ptr: *mut c_void,
        len: usize,
        size: usize,
        dt: ffi::MPI_Datatype,
        op: ReduceOp,
    ) {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(MAX_COUNT);
            // SAFETY: `ptr` holds `len` elements of `size` bytes; the chunk is in bounds.
            let at = unsafe { ptr.cast::<u8>().add(done * size) }.cast::<c_void>();
            let send: *const c_void = match self.in_place {
                Some(sentinel) => sentinel as *const c_void,
                None => {
                    self.scratch.clear();
                    // SAFETY: the chunk is `n * size` initialised bytes.
                    self.scratch.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(at.cast::<u8>(), n * size)
                    });
                    self.scratch.as_ptr().cast()
                }
            };
            // SAFETY: `at` holds `n` elements of type `dt`; `send` is MPI_IN_PLACE or a
            // same-sized copy. MPI_ERRORS_ARE_FATAL: it returns only on success.
            unsafe {
                ffi::MPI_Allreduce(send, at, n as c_int, dt, reduce_op(op), world());
            }
            done += n;
        }
    }

    fn finish_avg<T: Element>(&self, buf: &mut [T], op: ReduceOp) {
        if op == ReduceOp::Avg {
            for v in buf {
                *v = v.div_world(self.world_size);
            }
        }
    }

    fn tag(&self, tag: u32, op: &'static str) -> phalanx_transport::Result<c_int> {
        c_int::try_from(tag).map_err(|_| phalanx_transport::Error::Io {
            op,
            peer: self.rank,
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("tag {tag} is above MPI's largest tag ({})", c_int::MAX),
            ),
        })
    }
}

/// Every collective is one call of the MPI library (the mapping in `mpi/mod.rs`); the
/// library picks its algorithms, and orders nothing by phalanx's sequence numbers.
impl Backend for MpiComm {
    fn name(&self) -> &'static str {
        "mpi"
    }

    fn describe(&self, _algo: Algorithm) -> String {
        "MPI".to_string()
    }

    fn allreduce<T: Element>(
        &mut self,
        _seq: u64,
        buf: &mut [T],
        op: ReduceOp,
        _opts: &Options,
    ) -> Ran {
        match reduce_type(T::DTYPE) {
            Some(dt) => {
                self.allreduce_raw(buf.as_mut_ptr().cast(), buf.len(), size_of::<T>(), dt, op)
            }
            None => {
                let mut wide: Vec<f32> = buf.iter().map(|v| v.to_f64() as f32).collect();
                // SAFETY: reading a constant handle.
                let dt = unsafe { ffi::RSMPI_FLOAT };
                self.allreduce_raw(wide.as_mut_ptr().cast(), wide.len(), 4, dt, op);
                for (v, w) in buf.iter_mut().zip(&wide) {
                    *v = T::from_f64(f64::from(*w));
                }
            }
        }
        self.finish_avg(buf, op);
        Ok(Algorithm::Direct)
    }

    fn broadcast<T: Element>(
        &mut self,
        _seq: u64,
        buf: &mut [T],
        root: usize,
        _opts: &Options,
    ) -> Ran {
        let bytes = size_of_val(buf);
        let ptr = buf.as_mut_ptr().cast::<u8>();
        let mut done = 0;
        while done < bytes {
            let n = (bytes - done).min(MAX_COUNT);
            // SAFETY: `ptr` holds `bytes` bytes; the chunk is in bounds.
            unsafe {
                ffi::MPI_Bcast(
                    ptr.add(done).cast(),
                    n as c_int,
                    bytes_type(),
                    root as c_int,
                    world(),
                );
            }
            done += n;
        }
        Ok(Algorithm::Direct)
    }

    fn barrier(&mut self, _seq: u64) -> Ran {
        // SAFETY: no buffers.
        unsafe {
            ffi::MPI_Barrier(world());
        }
        Ok(Algorithm::Direct)
    }

    fn allgather<T: Element>(
        &mut self,
        _seq: u64,
        send: &[T],
        recv: &mut [T],
        _opts: &Options,
    ) -> Ran {
        let bytes = size_of_val(send);
        if bytes > MAX_COUNT {
            return Err(too_large("MPI_Allgather", self.rank, bytes));
        }
        debug_assert_eq!(recv.len(), send.len() * self.world_size);
        // SAFETY: `send` holds `bytes` bytes and `recv` world_size times as many (checked by
        // ProcessGroup::allgather).
        unsafe {
            ffi::MPI_Allgather(
                send.as_ptr().cast(),
                bytes as c_int,
                bytes_type(),
                recv.as_mut_ptr().cast(),
                bytes as c_int,
                bytes_type(),
                world(),
            );
        }
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
        if recv.len() > MAX_COUNT {
            return Err(too_large("MPI_Reduce_scatter_block", self.rank, recv.len()));
        }
        debug_assert_eq!(send.len(), recv.len() * self.world_size);
        let call = |s: *const c_void, r: *mut c_void, n: usize, dt| {
            // SAFETY: `s` holds world_size blocks of `n` elements of `dt`, `r` one block
            // (checked by ProcessGroup::reduce_scatter).
            unsafe {
                ffi::MPI_Reduce_scatter_block(s, r, n as c_int, dt, reduce_op(op), world());
            }
        };
        match reduce_type(T::DTYPE) {
            Some(dt) => call(
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                recv.len(),
                dt,
            ),
            None => {
                let wide: Vec<f32> = send.iter().map(|v| v.to_f64() as f32).collect();
                let mut out = vec![0f32; recv.len()];
                // SAFETY: reading a constant handle.
                let dt = unsafe { ffi::RSMPI_FLOAT };
                call(wide.as_ptr().cast(), out.as_mut_ptr().cast(), out.len(), dt);
                for (v, w) in recv.iter_mut().zip(&out) {
                    *v = T::from_f64(f64::from(*w));
                }
            }
        }
        self.finish_avg(recv, op);
        Ok(Algorithm::Direct)
    }

    fn send<T: Element>(&mut self, buf: &[T], peer: usize, tag: u32) -> Ran {
        let tag = self.tag(tag, "MPI_Send")?;
        let (ptr, bytes) = (buf.as_ptr().cast::<u8>(), size_of_val(buf));
        for (at, n) in message_chunks(bytes) {
            // SAFETY: the chunk lies within `buf`.
            unsafe {
                ffi::MPI_Send(
                    ptr.add(at).cast(),
                    n as c_int,
                    bytes_type(),
                    peer as c_int,
                    tag,
                    world(),
                );
            }
        }
        Ok(Algorithm::Direct)
    }

    fn recv<T: Element>(&mut self, buf: &mut [T], peer: usize, tag: u32) -> Ran {
        let tag = self.tag(tag, "MPI_Recv")?;
        let (ptr, bytes) = (buf.as_mut_ptr().cast::<u8>(), size_of_val(buf));
        for (at, n) in message_chunks(bytes) {
            // SAFETY: the chunk lies within `buf`; the status is ignored.
            unsafe {
                ffi::MPI_Recv(
                    ptr.add(at).cast(),
                    n as c_int,
                    bytes_type(),
                    peer as c_int,
                    tag,
                    world(),
                    ffi::RSMPI_STATUS_IGNORE,
                );
            }
        }
        Ok(Algorithm::Direct)
    }

    /// `MPI_Abort`: the failure path of Note [Fail fast], by MPI's means.
    fn abort(&mut self, rank: usize, cause: &str) {
        MpiComm::abort_job(rank, cause)
    }
}

// Note [MPI_IN_PLACE value]: the MPI standard defines MPI_IN_PLACE as a macro, which bindgen cannot
// export, and mpi-sys does not wrap it. Its value is part of each implementation's ABI:
// `(void *) 1` in Open MPI's mpi.h, `(void *) -1` in MPICH's (also Intel MPI and MVAPICH).
// Any other library reduces from a copy of the buffer instead (one memcpy per call).
fn in_place_sentinel(library: &str) -> Option<usize> {
    if library.contains("Open MPI") {
        Some(1)
    } else if library.contains("MPICH") || library.contains("Intel(R) MPI") {
        Some(usize::MAX)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_follows_the_library() {
        assert_eq!(
            in_place_sentinel("Open MPI v4.1.4, package: Debian OpenMPI"),
            Some(1)
        );
        assert_eq!(in_place_sentinel("MPICH Version:\t4.0.2"), Some(usize::MAX));
        assert_eq!(in_place_sentinel("Some Other MPI 1.0"), None);
    }
}
