//! Communication hooks: how one bucket of gradients is averaged across ranks.
//!
//! Note [DDP communication hook]
//! As in PyTorch (`register_comm_hook`), a hook receives a packed bucket (flat `f32`, already
//! holding this rank's gradients) and returns a handle whose `wait` yields the bucket averaged over
//! ranks. Hooks are launched in bucket order and must start their communication before returning,
//! so that the reducer can pack the next bucket while this one is on the wire. Every rank must use
//! the same hook, and a hook must give bitwise identical results on every rank.

use std::any::Any;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use half::bf16;
use phalanx_core::ReduceOp;
use phalanx_pg::ProcessGroup;

use crate::{Error, Result};

/// One bucket of gradients, packed in the bucket's parameter order.
#[derive(Debug)]
pub struct GradBucket {
    /// Position in launch order (0 is launched first).
    pub index: usize,
    /// The flat gradients of the bucket's parameters, this rank's values.
    pub buffer: BucketBuffer,
    /// Whether this is the last bucket of the step.
    pub is_last: bool,
}

/// A bucket's flat `f32` gradients: a buffer the reducer packed, or one parameter's gradient in
/// the tensor library's own memory (Note [Gradient as bucket view] in `bucket.rs`). Either way
/// a hook reads and writes it as a slice; it goes back to the reducer from [`BucketWork::wait`].
#[derive(Debug)]
pub struct BucketBuffer(Storage);

#[derive(Debug)]
enum Storage {
    Packed(Vec<f32>),
    Lent(Box<dyn LentGradient>),
}

/// A gradient lent by the tensor library for one step: read and averaged in place, then handed
/// back to the library as the averaged gradient, with no copy either way.
pub trait LentGradient: Send + std::fmt::Debug {
    /// The values.
    fn as_slice(&self) -> &[f32];
    /// The values, to be overwritten in place.
    fn as_mut_slice(&mut self) -> &mut [f32];
    /// Back to the concrete type the library lent.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl BucketBuffer {
    /// A gradient in the tensor library's memory.
    pub fn lent(gradient: impl LentGradient + 'static) -> Self {
        BucketBuffer(Storage::Lent(Box::new(gradient)))
    }

    /// The packed buffer, or the lent gradient as the library lent it.
    pub fn into_inner(self) -> std::result::Result<Vec<f32>, Box<dyn Any>> {
        match self.0 {
            Storage::Packed(v) => Ok(v),
            Storage::Lent(g) => Err(g.into_any()),
        }
    }

    /// The packed buffer, to append to; `None` for a lent gradient.
    pub fn packed_mut(&mut self) -> Option<&mut Vec<f32>> {
        match &mut self.0 {
            Storage::Packed(v) => Some(v),
            Storage::Lent(_) => None,
        }
    }
}

impl From<Vec<f32>> for BucketBuffer {
    fn from(v: Vec<f32>) -> Self {
        BucketBuffer(Storage::Packed(v))
    }
}

impl Default for BucketBuffer {
    fn default() -> Self {
        Vec::new().into()
    }
}

impl Deref for BucketBuffer {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match &self.0 {
            Storage::Packed(v) => v,
            Storage::Lent(g) => g.as_slice(),
        }
    }
}

impl DerefMut for BucketBuffer {
    fn deref_mut(&mut self) -> &mut [f32] {
        match &mut self.0 {
            Storage::Packed(v) => v,
            Storage::Lent(g) => g.as_mut_slice(),
        }
    }
}

impl AsMut<[f32]> for BucketBuffer {
    fn as_mut(&mut self) -> &mut [f32] {
        self
    }
}

/// The pending result of a hook: `wait` returns the averaged bucket.
#[must_use = "a bucket's communication must be waited for"]
pub struct BucketWork {
    wait: Box<dyn FnOnce() -> Result<BucketBuffer> + Send>,
}

impl BucketWork {
    /// Wraps the completion of an asynchronous operation.
    pub fn new(wait: impl FnOnce() -> Result<BucketBuffer> + Send + 'static) -> Self {
        BucketWork {
            wait: Box::new(wait),
        }
    }

    /// An already computed result (hooks that reduce synchronously).
    pub fn ready(buffer: BucketBuffer) -> Self {
        BucketWork::new(move || Ok(buffer))
    }

    /// Blocks until the bucket is averaged and returns it.
    pub fn wait(self) -> Result<BucketBuffer> {
        (self.wait)()
    }
}

/// A communication hook (PyTorch's `CommHookInterface`): averages one bucket across ranks.
pub trait CommHook: Send + Sync + std::fmt::Debug {
    /// Short name for logs and metrics.
    fn name(&self) -> &'static str;
    /// Starts averaging `bucket` over the ranks of `pg` and returns its pending result.
    fn launch(&self, pg: &Arc<ProcessGroup>, bucket: GradBucket) -> BucketWork;
    /// Bytes this hook puts on the wire per bucket element (for metrics).
    fn bytes_per_element(&self) -> usize;
    /// Whether this hook is the plain allreduce average of the `f32` buffer: then device
    /// buckets (which bypass hooks) may stand in for it, and the step header (Note [Step
    /// header]) may ride in its first bucket. `false` by default: a custom hook gets exactly the
    /// gradients, and the header travels on its own.
    fn is_plain_average(&self) -> bool {
        false
    }
}

/// The default hook: allreduce the `f32` bucket with `ReduceOp::Avg` (PyTorch's `allreduce_hook`).
#[derive(Debug, Default, Clone, Copy)]
pub struct AllreduceHook;

impl CommHook for AllreduceHook {
    fn name(&self) -> &'static str {
        "allreduce"
    }

    fn launch(&self, pg: &Arc<ProcessGroup>, bucket: GradBucket) -> BucketWork {
        if pg.world_size() == 1 {
            // The average over one rank is the buffer itself (bitwise: x / 1 == x); skipping the
            // hand-off to the group's worker thread saves a wake-up per bucket.
            return BucketWork::ready(bucket.buffer);
        }
        let index = bucket.index;
        let err = move |source| Error::Collective {
            op: "allreduce",
            bucket: index,
            source,
        };
        if bucket.index == 0 && bucket.is_last {
            // A single bucket has nothing to overlap with: run it on the caller's thread when it
            // is awaited, sparing the hand-off to the group's worker thread.
            let (pg, mut buf) = (pg.clone(), bucket.buffer);
            return BucketWork::new(move || {
                pg.allreduce(&mut buf, ReduceOp::Avg)
                    .map(|()| buf)
                    .map_err(err)
            });
        }
        let work = pg.allreduce_async_buffer(bucket.buffer, ReduceOp::Avg);
        BucketWork::new(move || work.wait().map_err(err))
    }

    fn bytes_per_element(&self) -> usize {
        4
    }

    fn is_plain_average(&self) -> bool {
        true
    }
}

/// bf16 compression (PyTorch's `bf16_compress_hook`): the bucket is rounded to bf16, averaged in
/// bf16 (half the bytes on the wire), and widened back to `f32`. Every rank widens the same bf16
/// values, so replicas stay bitwise identical; the gradients lose precision (8 mantissa bits).
#[derive(Debug, Default, Clone, Copy)]
pub struct Bf16CompressHook;

impl CommHook for Bf16CompressHook {
    fn name(&self) -> &'static str {
        "bf16_compress"
    }

    fn launch(&self, pg: &Arc<ProcessGroup>, bucket: GradBucket) -> BucketWork {
        let index = bucket.index;
        let compressed: Vec<bf16> = bucket.buffer.iter().map(|&g| bf16::from_f32(g)).collect();
        let mut buffer = bucket.buffer;
        let work = pg.allreduce_async(compressed, ReduceOp::Avg);
        BucketWork::new(move || {
            let reduced = work.wait().map_err(|source| Error::Collective {
                op: "allreduce(bf16)",
                bucket: index,
                source,
            })?;
            for (out, v) in buffer.iter_mut().zip(reduced) {
                *out = v.to_f32();
            }
            Ok(buffer)
        })
    }

    fn bytes_per_element(&self) -> usize {
        2
    }
}
