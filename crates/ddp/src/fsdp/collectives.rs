//! The collectives of a sharded step, over [`Unit`]s: the reduce-scatter of gradients into
//! their owners (a [`CommHook`], so that DDP's reducer packs, overlaps and accumulates the
//! buckets exactly as it does for DDP), and the all-gather of parameters from their owners.

use std::sync::Arc;

use phalanx_core::ReduceOp;
use phalanx_pg::{ProcessGroup, Work};

use crate::hook::{BucketWork, CommHook, GradBucket};
use crate::layout::{Ownership, Unit};
use crate::{Error, Result};

/// Reduce-scatters each bucket in place: afterwards this rank's block of the bucket holds the
/// average of every rank's gradients for the elements it owns (Note [Shard layout]); the
/// other blocks are left unspecified. Not a plain average: the step header travels on its
/// own (Note [Step header]).
///
/// Under `hybrid` the reduce-scatter runs within the shard group, and this rank's block is
/// then averaged across the replicas (the ranks that own the same elements in the other
/// groups), when the bucket is awaited.
#[derive(Debug)]
pub(crate) struct ReduceScatterHook {
    /// Per bucket, in launch order: the elements each rank of the shard group owns.
    counts: Vec<Vec<usize>>,
    shard: Arc<ProcessGroup>,
    replica: Option<Arc<ProcessGroup>>,
}

impl ReduceScatterHook {
    pub(crate) fn new(
        units: &[Unit],
        shard: Arc<ProcessGroup>,
        replica: Option<Arc<ProcessGroup>>,
    ) -> Self {
        ReduceScatterHook {
            counts: units.iter().map(Unit::counts).collect(),
            shard,
            replica,
        }
    }
}

impl CommHook for ReduceScatterHook {
    fn name(&self) -> &'static str {
        "reduce_scatter"
    }

    fn launch(&self, _world: &Arc<ProcessGroup>, bucket: GradBucket) -> BucketWork {
        let index = bucket.index;
        let counts = self.counts[index].clone();
        let rank = self.shard.rank();
        let own = counts[..rank].iter().sum::<usize>()..counts[..=rank].iter().sum::<usize>();
        let work = match self.shard.world_size() {
            1 => Work::ready(Ok(bucket.buffer)),
            _ => self
                .shard
                .reduce_scatter_v_async_buffer(bucket.buffer, counts, ReduceOp::Avg),
        };
        let replica = self.replica.clone();
        BucketWork::new(move || {
            let err = |op| {
                move |source| Error::Collective {
                    op,
                    bucket: index,
                    source,
                }
            };
            let mut buffer = work.wait().map_err(err("reduce_scatter_v"))?;
            if let Some(replica) = replica {
                replica
                    .allreduce(&mut buffer[own], ReduceOp::Avg)
                    .map_err(err("allreduce(across replicas)"))?;
            }
            Ok(buffer)
        })
    }

    fn bytes_per_element(&self) -> usize {
        4
    }
}

/// Starts the all-gather of unit `unit`'s values from their owners: `own` is this rank's
/// block (its slots' values, in order); the whole unit buffer comes back from the work.
pub(crate) fn gather_unit(pg: &ProcessGroup, unit: &Unit, own: Vec<f32>) -> Work<Vec<f32>> {
    if pg.world_size() == 1 {
        return Work::ready(Ok(own));
    }
    pg.allgather_v_async(own, unit.counts())
}

/// Writes a gathered unit buffer into whole parameters: `params[p]` (sized to the
/// parameter) receives every slot of `p`.
pub(crate) fn scatter_into_params(
    unit: &Unit,
    ownership: &Ownership,
    buffer: &[f32],
    params: &mut [Vec<f32>],
) {
    for slot in unit.all_slots(ownership) {
        params[slot.param][slot.in_param].copy_from_slice(&buffer[slot.in_unit]);
    }
}

/// Waits for a unit's all-gather, naming the unit in the error.
pub(crate) fn wait_gather(work: Work<Vec<f32>>, unit: usize) -> Result<Vec<f32>> {
    work.wait().map_err(|source| Error::Collective {
        op: "allgather_v(parameters)",
        bucket: unit,
        source,
    })
}
