//! [`ShardGroups`]: the groups a sharded model's collectives run in. The elements are
//! sharded among the ranks of a shard group: the whole group, but under `hybrid` (HSDP) the
//! `"shard"` dimension of a [`Mesh`] over `("replicate", r), ("shard", s)`: consecutive ranks
//! (default: one host's), while the ranks at the same place in every shard group are replicas
//! of each other and average their shards.

use std::sync::Arc;

use phalanx_pg::{Mesh, ProcessGroup};

use crate::fsdp::{FsdpOptions, Sharding};
use crate::{Error, Result};

/// The shard group and, under `hybrid`, the replica group.
pub(super) struct ShardGroups {
    /// The ranks among which the elements are sharded (Note [Shard layout]).
    pub(super) shard: Arc<ProcessGroup>,
    /// Under `hybrid`: the ranks that own the same elements in the other shard groups (none
    /// when there is one shard group).
    pub(super) replica: Option<Arc<ProcessGroup>>,
}

impl ShardGroups {
    /// The groups of `pg` for `options`. A collective of `pg` under `hybrid`.
    pub(super) fn new(pg: &Arc<ProcessGroup>, options: &FsdpOptions) -> Result<ShardGroups> {
        match options.sharding {
            Sharding::Hybrid => hybrid(pg, options.shard_group_size),
            _ => Ok(ShardGroups {
                shard: pg.clone(),
                replica: None,
            }),
        }
    }
}

/// `hybrid`'s groups: consecutive ranks of `size` (default: one host's) shard, and the ranks
/// at the same place in every such group replicate.
fn hybrid(pg: &Arc<ProcessGroup>, size: Option<usize>) -> Result<ShardGroups> {
    let world = pg.world_size();
    let size = match size {
        Some(s) => s,
        None => {
            // Every host must hold as many ranks, numbered host after host (torchrun's and
            // phalanx launch's numbering), for one host's ranks to be a shard group.
            let local = pg.local_world_size();
            let mut all = vec![0i64; world];
            pg.allgather(&[local as i64], &mut all)
                .map_err(|source| Error::Setup {
                    op: "allgather(ranks per host)",
                    source,
                })?;
            if all.iter().any(|&l| l != local as i64) {
                return Err(Error::Options {
                    reason: format!(
                        "--sharding hybrid shards within a host, and the hosts hold different \
                         numbers of ranks ({all:?}): give every host the same --nproc-per-node"
                    ),
                });
            }
            local
        }
    };
    if size == 0 || !world.is_multiple_of(size) {
        return Err(Error::Options {
            reason: format!(
                "--sharding hybrid: shard groups of {size} ranks do not divide the {world} ranks"
            ),
        });
    }
    // HSDP's 2-D mesh (Note [Mesh layout] in phalanx-pg): consecutive ranks shard.
    let mesh =
        Mesh::new(pg, &[("replicate", world / size), ("shard", size)]).map_err(|source| {
            Error::Setup {
                op: "Mesh::new(replicate, shard)",
                source,
            }
        })?;
    let group = |name| {
        mesh.group(name)
            .expect("the mesh has this dimension")
            .clone()
    };
    let replica = group("replicate");
    Ok(ShardGroups {
        shard: group("shard"),
        replica: (replica.world_size() > 1).then_some(replica),
    })
}
