//! [`Mesh`]: the ranks of a group laid out on a grid of named dimensions, with one subgroup
//! along each dimension: PyTorch's `DeviceMesh` (`init_device_mesh(..., mesh_shape,
//! mesh_dim_names)`, `mesh["shard"].get_group()`, `mesh.get_local_rank("shard")`).
//!
//! Note [Mesh layout]
//! Ranks fill the grid in row-major order, the last dimension fastest, as `DeviceMesh` lays
//! out `torch.arange(world).view(mesh_shape)`: with dimensions `("replicate", 2), ("shard",
//! 4)` ranks 0–3 are one shard group and ranks 0 and 4 one replica group. So the last
//! dimension is the one whose ranks are closest (consecutive ranks share a host under
//! torchrun's and phalanx launch's numbering): put the dimension that talks most there (FSDP's
//! shard, tensor parallelism), and the one that talks least first (replicas, pipeline
//! stages). The group along dimension `d` holds the ranks whose coordinates differ from this
//! rank's in `d` only, ordered by their coordinate in `d` (which is also their order as
//! ranks). Every rank builds every dimension's group, in the order of the dimensions, with
//! [`split_group`](crate::split_group): building a mesh is a collective of the whole group,
//! and every rank must give the same dimensions (checked: a rank that disagrees is named).
//!
//! ```
//! use phalanx_core::ReduceOp;
//! use phalanx_pg::Mesh;
//! let sums = phalanx_testing::spawn_ranks(4, |pg| {
//!     // HSDP's mesh: 2 replicas of 2 shards.
//!     let mesh = Mesh::new(&pg, &[("replicate", 2), ("shard", 2)]).unwrap();
//!     let mut x = [pg.rank() as f32];
//!     mesh.group("shard").unwrap().allreduce(&mut x, ReduceOp::Sum).unwrap();
//!     (mesh.coordinate("replicate").unwrap(), x[0])
//! });
//! // Ranks 0 and 1 shard together, and ranks 2 and 3.
//! assert_eq!(sums, vec![(0, 1.0), (0, 1.0), (1, 5.0), (1, 5.0)]);
//! ```

use std::sync::Arc;

use crate::subgroup::{agree, next_subgroup};
use crate::{split_group, Error, ProcessGroup, Result};

/// A group's ranks on a grid of named dimensions, with a subgroup along each (Note [Mesh
/// layout]).
#[derive(Debug)]
pub struct Mesh {
    names: Vec<String>,
    shape: Vec<usize>,
    /// This rank's coordinate in each dimension.
    coordinates: Vec<usize>,
    /// The subgroup along each dimension.
    groups: Vec<Arc<ProcessGroup>>,
}

impl Mesh {
    /// Lays the ranks of `pg` out on `dims` (name and size, the last dimension fastest) and
    /// builds the subgroup along each dimension. The sizes must multiply to `pg`'s world
    /// size, and the names must differ. A collective of `pg`: every rank calls it with the
    /// same dimensions.
    pub fn new(pg: &ProcessGroup, dims: &[(&str, usize)]) -> Result<Mesh> {
        // Agreed first, so that a rank with other dimensions fails every rank at once
        // instead of leaving the others waiting in a split it will not make.
        let k = next_subgroup(pg, "Mesh::new")?;
        let key = format!("group/{k}/mesh");
        agree(pg, &key, "dimensions", &format!("{dims:?}"), "Mesh::new")?;
        let shape = check_dims(dims, pg.world_size()).map_err(|cause| Error::Collective {
            rank: pg.rank(),
            op: "Mesh::new".to_string(),
            cause,
        })?;
        let coordinates = coordinates_of(pg.rank(), &shape);
        let mut groups = Vec::with_capacity(shape.len());
        for d in 0..shape.len() {
            let color = color_along(&coordinates, &shape, d);
            let group = split_group(pg, Some(color as u32), pg.rank() as i64)?
                .expect("every rank has a color");
            debug_assert_eq!(group.rank(), coordinates[d]);
            groups.push(Arc::new(group));
        }
        Ok(Mesh {
            names: dims.iter().map(|(n, _)| n.to_string()).collect(),
            shape,
            coordinates,
            groups,
        })
    }

    /// The dimensions' names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The dimensions' sizes, in order.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The size of dimension `name` (`None`: the mesh has no such dimension).
    pub fn size(&self, name: &str) -> Option<usize> {
        self.dim(name).map(|d| self.shape[d])
    }

    /// This rank's coordinate along dimension `name`: its rank in that dimension's group
    /// (`DeviceMesh.get_local_rank`).
    pub fn coordinate(&self, name: &str) -> Option<usize> {
        self.dim(name).map(|d| self.coordinates[d])
    }

    /// The group of the ranks along dimension `name` with this rank (`mesh[name].get_group()`).
    pub fn group(&self, name: &str) -> Option<&Arc<ProcessGroup>> {
        self.dim(name).map(|d| &self.groups[d])
    }

    fn dim(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }
}

/// The sizes of `dims` when they lay out `world` ranks, or why not.
fn check_dims(dims: &[(&str, usize)], world: usize) -> std::result::Result<Vec<usize>, String> {
    if dims.is_empty() {
        return Err("a mesh needs at least one dimension".to_string());
    }
    for (i, (name, size)) in dims.iter().enumerate() {
        if name.is_empty() {
            return Err(format!("dimension {i} has no name"));
        }
        if *size == 0 {
            return Err(format!("dimension {name:?} has size 0"));
        }
        if dims[..i].iter().any(|(n, _)| n == name) {
            return Err(format!("dimension {name:?} is named twice in {dims:?}"));
        }
    }
    let shape: Vec<usize> = dims.iter().map(|(_, s)| *s).collect();
    let product = shape.iter().try_fold(1usize, |p, &s| p.checked_mul(s));
    if product != Some(world) {
        return Err(format!(
            "the dimensions {dims:?} hold {} ranks, but the group has {world}",
            product.map_or("more than usize::MAX".to_string(), |p| p.to_string())
        ));
    }
    Ok(shape)
}

/// The coordinates of `rank` on a grid of `shape`, row-major (the last dimension fastest).
fn coordinates_of(rank: usize, shape: &[usize]) -> Vec<usize> {
    let mut rest = rank;
    let mut coordinates = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        coordinates[d] = rest % shape[d];
        rest /= shape[d];
    }
    coordinates
}

/// The color of the group along dimension `d` of a rank at `coordinates`: its coordinates in
/// every other dimension, row-major, so that ranks differing only in `d` share it.
fn color_along(coordinates: &[usize], shape: &[usize], d: usize) -> usize {
    (0..shape.len())
        .filter(|&e| e != d)
        .fold(0, |color, e| color * shape[e] + coordinates[e])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_fill_the_grid_row_major() {
        let shape = [2, 3];
        let coords: Vec<Vec<usize>> = (0..6).map(|r| coordinates_of(r, &shape)).collect();
        assert_eq!(coords[0], [0, 0]);
        assert_eq!(coords[2], [0, 2]);
        assert_eq!(coords[3], [1, 0]);
        assert_eq!(coords[5], [1, 2]);
    }

    #[test]
    fn a_group_along_a_dimension_holds_the_ranks_that_differ_there_only() {
        let shape = [2, 2, 3];
        for d in 0..3 {
            for r in 0..12 {
                let mine = coordinates_of(r, &shape);
                let color = color_along(&mine, &shape, d);
                let members: Vec<usize> = (0..12)
                    .filter(|&o| color_along(&coordinates_of(o, &shape), &shape, d) == color)
                    .collect();
                assert_eq!(members.len(), shape[d], "dim {d}, rank {r}: {members:?}");
                for o in &members {
                    let theirs = coordinates_of(*o, &shape);
                    let differ: Vec<usize> = (0..3).filter(|&e| theirs[e] != mine[e]).collect();
                    assert!(differ.is_empty() || differ == [d], "{mine:?} {theirs:?}");
                }
            }
        }
        // HSDP: consecutive ranks shard, rank r and r + 4 replicate.
        let shape = [2, 4];
        let c = |r| coordinates_of(r, &shape);
        assert_eq!(color_along(&c(0), &shape, 1), color_along(&c(3), &shape, 1));
        assert_ne!(color_along(&c(0), &shape, 1), color_along(&c(4), &shape, 1));
        assert_eq!(color_along(&c(1), &shape, 0), color_along(&c(5), &shape, 0));
    }

    #[test]
    fn bad_dimensions_are_refused_naming_them() {
        assert_eq!(check_dims(&[("dp", 2), ("tp", 3)], 6), Ok(vec![2, 3]));
        let err = |dims: &[(&str, usize)], world| check_dims(dims, world).unwrap_err();
        assert!(err(&[], 4).contains("at least one dimension"));
        assert!(err(&[("dp", 2), ("tp", 3)], 4).contains("hold 6 ranks, but the group has 4"));
        assert!(err(&[("dp", 0)], 4).contains("\"dp\" has size 0"));
        assert!(err(&[("dp", 2), ("dp", 2)], 4).contains("\"dp\" is named twice"));
        assert!(err(&[("", 4)], 4).contains("dimension 0 has no name"));
        assert!(err(&[("a", usize::MAX), ("b", 2)], 4).contains("more than usize::MAX"));
    }
}
