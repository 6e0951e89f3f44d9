//! The reducer: packs gradients into buckets, launches each bucket's hook as soon as it is packed,
//! and unpacks the averaged buckets in launch order. Framework-agnostic: it sees parameters as
//! indices and flat `f32` slices; the tensor library's side supplies them through
//! [`GradientSource`] and takes the averaged buckets back through a drain callback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use phalanx_core::{trace, ReduceOp};
use phalanx_pg::ProcessGroup;

use crate::hook::{BucketBuffer, BucketWork, CommHook, GradBucket};
use crate::stats::CommStats;
use crate::step_header::Agreement;
use crate::{Error, Result};

/// Where a step's gradients come from: the tensor library's side of the reducer's contract
/// (the Burn adapter's `GradTable` with this step's gradients, or zeros for a joined rank).
pub(crate) trait GradientSource {
    /// Writes trainable parameter `p`'s gradient into `out` (`out += grad` when `accumulate`);
    /// a parameter without a gradient counts as zeros.
    fn fill(&mut self, p: usize, out: &mut [f32], accumulate: bool) -> Result<()>;

    /// Lends trainable parameter `p`'s gradient in the library's own memory (Note [Gradient as
    /// bucket view] in `bucket.rs`); `None` when it has none.
    fn lend(&mut self, p: usize) -> Result<Option<BucketBuffer>>;
}

/// Layout of the buckets over the parameters, and the buffers that carry them.
pub(crate) struct Reducer {
    /// Per bucket, in launch order: the parameter indices and their offsets in the flat buffer.
    buckets: Vec<BucketLayout>,
    /// Buffers returned by the previous step, reused to avoid reallocating ~the model size.
    spare: Vec<Option<Vec<f32>>>,
    /// Gradients accumulated by `no_sync` steps, per bucket; all `None` when nothing is pending.
    accumulated: Vec<Option<Vec<f32>>>,
    pub(crate) stats: CommStats,
}

impl BucketLayout {
    /// `(param, range in the bucket buffer)` of each parameter of the bucket.
    pub(crate) fn slots(&self) -> impl Iterator<Item = (usize, std::ops::Range<usize>)> + '_ {
        self.params
            .iter()
            .zip(&self.offsets)
            .zip(&self.numels)
            .map(|((&p, &o), &n)| (p, o..o + n))
    }
}

pub(crate) struct BucketLayout {
    pub(crate) params: Vec<usize>,
    pub(crate) offsets: Vec<usize>,
    pub(crate) numels: Vec<usize>,
    pub(crate) len: usize,
    /// One parameter whose gradient's own buffer is the bucket (Note [Gradient as bucket view]).
    pub(crate) view: bool,
}

impl Reducer {
    /// `assignment` lists, per bucket in launch order, parameter indices; `numels` is indexed by
    /// parameter. With `views`, a bucket of one parameter is that gradient's own buffer.
    pub(crate) fn new(assignment: Vec<Vec<usize>>, numels: &[usize], views: bool) -> Self {
        let buckets: Vec<BucketLayout> = assignment
            .into_iter()
            .map(|params| {
                let mut offsets = Vec::with_capacity(params.len());
                let mut sizes = Vec::with_capacity(params.len());
                let mut len = 0;
                for &p in &params {
                    offsets.push(len);
                    sizes.push(numels[p]);
                    len += numels[p];
                }
                BucketLayout {
                    view: views && params.len() == 1,
                    params,
                    offsets,
                    numels: sizes,
                    len,
                }
            })
            .collect();
        let n = buckets.len();
        Reducer {
            buckets,
            spare: (0..n).map(|_| None).collect(),
            accumulated: (0..n).map(|_| None).collect(),
            stats: CommStats::default(),
        }
    }

    pub(crate) fn buckets(&self) -> &[BucketLayout] {
        &self.buckets
    }

    /// The layout and the statistics, for device buckets (which keep no buffers here).
    pub(crate) fn layout_and_stats(&mut self) -> (&[BucketLayout], &mut CommStats) {
        (&self.buckets, &mut self.stats)
    }

    /// Whether `no_sync` gradients wait for the next synchronisation.
    pub(crate) fn has_accumulated(&self) -> bool {
        self.accumulated.iter().any(Option::is_some)
    }

    /// A `no_sync` step: adds this step's gradients to the local accumulators, no communication.
    pub(crate) fn accumulate(&mut self, source: &mut impl GradientSource) -> Result<()> {
        for (k, bucket) in self.buckets.iter().enumerate() {
            let (mut buf, add) = match self.accumulated[k].take() {
                Some(buf) => (buf, true),
                None => (take_buffer(&mut self.spare[k], bucket.len), false),
            };
            pack(bucket, &mut buf, add, source)?;
            self.accumulated[k] = Some(buf);
        }
        Ok(())
    }

    /// A synchronising step: packs this step's gradients (plus any accumulated ones) bucket by
    /// bucket, launches `hook` on each bucket right after packing it, then waits for the buckets in
    /// launch order and hands each averaged bucket to `drain(layout, buffer, agreement)` as soon
    /// as it arrives, while later buckets are still on the wire; `drain` may take the buffer. `header` is this rank's step
    /// header over `params` trainable parameters (Note [Step header]): it rides at the end of the
    /// first bucket under a plain-average hook, in its own allreduce otherwise. Returns what the
    /// ranks agreed on.
    pub(crate) fn synchronize(
        &mut self,
        pg: &Arc<ProcessGroup>,
        hook: &dyn CommHook,
        header: Vec<f32>,
        params: usize,
        source: &mut impl GradientSource,
        mut drain: impl FnMut(&BucketLayout, &mut BucketBuffer, &Agreement),
    ) -> Result<Agreement> {
        let started = Instant::now();
        let last = self.buckets.len().saturating_sub(1);
        // Not in a view bucket: appending to a gradient's own buffer would copy it.
        let in_bucket = hook.is_plain_average() && self.buckets.first().is_some_and(|b| !b.view);
        let mut header = Some(header);
        let header_work = match in_bucket {
            true => None,
            false => Some(pg.allreduce_async(header.take().unwrap_or_default(), ReduceOp::Sum)),
        };
        let mut pending: Vec<BucketWork> = Vec::with_capacity(self.buckets.len());
        let mut bytes = 0u64;
        for (k, bucket) in self.buckets.iter().enumerate() {
            let packing = trace::span("pack", "pack")
                .arg("bucket", k)
                .arg("bytes", bucket.len * 4);
            let packed = match self.accumulated[k].take() {
                Some(mut buf) => pack(bucket, &mut buf, true, source).map(|()| buf.into()),
                None if bucket.view => source
                    .lend(bucket.params[0])
                    .map(|g| g.unwrap_or_else(|| vec![0.0; bucket.len].into())),
                None => {
                    let mut buf = take_buffer(&mut self.spare[k], bucket.len);
                    pack(bucket, &mut buf, false, source).map(|()| buf.into())
                }
            };
            drop(packing);
            let mut buf = match packed {
                Ok(buf) => buf,
                Err(e) => {
                    // Already launched work must still complete before the error is returned, or
                    // its collectives would be left half-issued on this rank.
                    drain_pending(pending);
                    if let Some(work) = header_work {
                        let _ = work.wait();
                    }
                    return Err(e);
                }
            };
            if let Some(header) = header.take() {
                buf.packed_mut()
                    .expect("the header rides in a packed bucket")
                    .extend_from_slice(&header);
            }
            bytes += (buf.len() * hook.bytes_per_element()) as u64;
            pending.push(hook.launch(
                pg,
                GradBucket {
                    index: k,
                    buffer: buf,
                    is_last: k == last,
                },
            ));
        }
        let mut waited = Duration::ZERO;
        let mut agreement = match header_work {
            Some(work) => {
                let t = Instant::now();
                let reduced = work.wait();
                waited += t.elapsed();
                match reduced {
                    Ok(h) => Some(Agreement::from_reduced(&h, params)),
                    Err(source) => {
                        drain_pending(pending);
                        return Err(Error::Sync {
                            op: "allreduce(step header)",
                            source,
                        });
                    }
                }
            }
            None => None,
        };
        let mut pending = pending.into_iter();
        for (k, work) in pending.by_ref().enumerate() {
            let t = Instant::now();
            let waiting = trace::span("wait", "wait").arg("bucket", k);
            let result = work.wait();
            drop(waiting);
            waited += t.elapsed();
            let mut buf = match result {
                Ok(buf) => buf,
                Err(e) => {
                    drain_pending(pending.collect());
                    return Err(e);
                }
            };
            let len = self.buckets[k].len;
            if agreement.is_none() {
                agreement = Some(Agreement::from_reduced(&buf[len..], params));
                buf.packed_mut()
                    .expect("the header rides in a packed bucket")
                    .truncate(len);
            }
            let agreed = agreement
                .as_ref()
                .expect("the header arrives with bucket 0");
            let _unpack = trace::span("unpack", "optimizer").arg("bucket", k);
            drain(&self.buckets[k], &mut buf, agreed);
            // A packed buffer the drain left is reused; a lent one goes back with the step.
            if let Ok(buf) = buf.into_inner() {
                if !buf.is_empty() {
                    self.spare[k] = Some(buf);
                }
            }
        }
        self.stats
            .record(waited, started.elapsed(), self.buckets.len(), bytes);
        Ok(agreement.expect("the header was reduced"))
    }
}

fn take_buffer(spare: &mut Option<Vec<f32>>, len: usize) -> Vec<f32> {
    match spare.take() {
        // The first bucket comes back with the step header cut off: its capacity has room
        // for the header, so appending it next time does not reallocate.
        Some(buf) if buf.len() == len => buf,
        _ => vec![0.0; len],
    }
}

fn pack(
    bucket: &BucketLayout,
    buf: &mut [f32],
    add: bool,
    source: &mut impl GradientSource,
) -> Result<()> {
    for (p, range) in bucket.slots() {
        source.fill(p, &mut buf[range], add)?;
    }
    Ok(())
}

fn drain_pending(pending: Vec<BucketWork>) {
    for work in pending {
        // The first error is the one reported; later ones are consequences of it.
        let _ = work.wait();
    }
}
