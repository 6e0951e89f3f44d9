//! The MPI backend's collectives: each one call of the MPI library on `MPI_COMM_WORLD`, with
//! the type and op mapping and `int`-count limits described in `mpi.rs`.

use std::os::raw::{c_int, c_void};

use mpi::ffi;
use phalanx_collectives::Algorithm;
use phalanx_core::{DType, Element, ReduceOp};

use super::MpiComm;

type Ran = phalanx_transport::Result<Algorithm>;

/// The largest count one MPI call takes (`int`).
const MAX_COUNT: usize = c_int::MAX as usize;

fn world() -> ffi::MPI_Comm {
    // SAFETY: a constant handle exported by mpi-sys, valid between init and finalize.
    unsafe { ffi::RSMPI_COMM_WORLD }
}

/// MPI's type for reducing `dtype`; `None` for bf16/f16 (reduced as f32).
fn reduce_type(dtype: DType) -> Option<ffi::MPI_Datatype> {
    // SAFETY: constant handles exported by mpi-sys.
    unsafe {
        match dtype {
            DType::F32 => Some(ffi::RSMPI_FLOAT),
            DType::F64 => Some(ffi::RSMPI_DOUBLE),
            DType::I32 => Some(ffi::RSMPI_INT32_T),
            DType::I64 => Some(ffi::RSMPI_INT64_T),
            DType::U8 => Some(ffi::RSMPI_UINT8_T),
            DType::BF16 | DType::F16 => None,
        }
    }
}

fn reduce_op(op: ReduceOp) -> ffi::MPI_Op {
    // SAFETY: constant handles exported by mpi-sys.
    unsafe {
        match op {
            ReduceOp::Sum | ReduceOp::Avg => ffi::RSMPI_SUM,
            ReduceOp::Min => ffi::RSMPI_MIN,
            ReduceOp::Max => ffi::RSMPI_MAX,
            ReduceOp::Product => ffi::RSMPI_PROD,
        }
    }
}

fn bytes_type() -> ffi::MPI_Datatype {
    // SAFETY: a constant handle exported by mpi-sys.
    unsafe { ffi::RSMPI_UINT8_T }
}

/// `(offset, length)` of the `MAX_COUNT`-byte pieces a point-to-point message of `bytes` travels
/// in. A zero-length message is still one (empty) piece: the receiver waits for it.
fn message_chunks(bytes: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..bytes.div_ceil(MAX_COUNT).max(1)).map(move |i| {
        let at = i * MAX_COUNT;
        (at, (bytes - at).min(MAX_COUNT))
    })
}

/// An argument MPI's `int` counts cannot express.
fn too_large(op: &'static str, rank: usize, what: usize) -> phalanx_transport::Error {
    phalanx_transport::Error::Io {
        op,
        peer: rank,
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{what} elements per rank exceed MPI's int count ({MAX_COUNT})"),
        ),
    }
}

impl MpiComm {
    pub(crate) fn allreduce<T: Element>(&mut self, buf: &mut [T], op: ReduceOp) -> Ran {
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

    pub(crate) fn broadcast<T: Element>(&mut self, buf: &mut [T], root: usize) -> Ran {
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

    pub(crate) fn barrier(&mut self) -> Ran {
        // SAFETY: no buffers.
        unsafe {
            ffi::MPI_Barrier(world());
        }
        Ok(Algorithm::Direct)
    }

    pub(crate) fn allgather<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Ran {
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

    pub(crate) fn reduce_scatter<T: Element>(
        &mut self,
        send: &mut [T],
        recv: &mut [T],
        op: ReduceOp,
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

    pub(crate) fn send<T: Element>(&mut self, buf: &[T], peer: usize, tag: u32) -> Ran {
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

    pub(crate) fn recv<T: Element>(&mut self, buf: &mut [T], peer: usize, tag: u32) -> Ran {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_split_at_mpis_int_count_and_empty_ones_still_travel() {
        assert_eq!(message_chunks(0).collect::<Vec<_>>(), [(0, 0)]);
        assert_eq!(message_chunks(5).collect::<Vec<_>>(), [(0, 5)]);
        assert_eq!(
            message_chunks(2 * MAX_COUNT + 3).collect::<Vec<_>>(),
            [(0, MAX_COUNT), (MAX_COUNT, MAX_COUNT), (2 * MAX_COUNT, 3)]
        );
    }
}
