//! `Mesh` (PyTorch's `DeviceMesh`): ranks on a grid of named dimensions, row-major, with a
//! working subgroup along each dimension; dimensions that differ between ranks, or that do not
//! hold the group, refused on every rank.

use phalanx_core::ReduceOp;
use phalanx_pg::Mesh;
use phalanx_testing::spawn_ranks;

/// Three dimensions, torchtitan's order (pipeline, data, tensor): each dimension's group holds
/// the ranks that differ from this one there only, and its collectives run.
#[test]
fn a_three_dimensional_mesh_has_a_working_group_along_each_dimension() {
    let out = spawn_ranks(8, |pg| {
        let mesh = Mesh::new(&pg, &[("pp", 2), ("dp", 2), ("tp", 2)]).unwrap();
        assert_eq!(mesh.shape(), [2, 2, 2]);
        assert_eq!(mesh.names(), ["pp", "dp", "tp"]);
        let mut sums = Vec::new();
        for dim in ["pp", "dp", "tp"] {
            let group = mesh.group(dim).unwrap();
            assert_eq!(group.world_size(), mesh.size(dim).unwrap());
            assert_eq!(group.rank(), mesh.coordinate(dim).unwrap());
            let mut x = [pg.rank() as i64];
            group.allreduce(&mut x, ReduceOp::Sum).unwrap();
            sums.push(x[0]);
        }
        assert!(mesh.group("cp").is_none() && mesh.size("cp").is_none());
        (
            ["pp", "dp", "tp"].map(|d| mesh.coordinate(d).unwrap()),
            sums,
        )
    });
    for (rank, (coords, sums)) in out.iter().enumerate() {
        // Row-major: rank = 4 pp + 2 dp + tp.
        assert_eq!(*coords, [rank / 4, rank / 2 % 2, rank % 2], "rank {rank}");
        // Along pp the partner is rank ± 4, along dp ± 2, along tp ± 1.
        let partner = |stride: usize| rank ^ stride;
        let want: Vec<i64> = [4, 2, 1]
            .iter()
            .map(|&s| (rank + partner(s)) as i64)
            .collect();
        assert_eq!(*sums, want, "rank {rank}");
    }
}

#[test]
fn ranks_that_give_different_dimensions_are_named_on_every_rank() {
    let out = spawn_ranks(4, |pg| {
        let dims: &[(&str, usize)] = match pg.rank() {
            1 => &[("shard", 2), ("replicate", 2)],
            _ => &[("replicate", 2), ("shard", 2)],
        };
        Mesh::new(&pg, dims).unwrap_err().to_string()
    });
    let joined = out.join("\n");
    assert!(
        joined.contains("asked for dimensions")
            && joined.contains("[(\"replicate\", 2), (\"shard\", 2)]")
            && joined.contains("[(\"shard\", 2), (\"replicate\", 2)]"),
        "{joined}"
    );
    assert!(
        out.iter().all(|e| e.contains("Mesh::new")),
        "every rank fails, naming Mesh::new: {joined}"
    );
}

#[test]
fn dimensions_that_do_not_hold_the_group_are_refused() {
    let out = spawn_ranks(4, |pg| {
        let a = Mesh::new(&pg, &[("dp", 2), ("tp", 3)])
            .unwrap_err()
            .to_string();
        let b = Mesh::new(&pg, &[("dp", 2), ("dp", 2)])
            .unwrap_err()
            .to_string();
        // The group still works after the refusals.
        let mesh = Mesh::new(&pg, &[("dp", 4)]).unwrap();
        let mut x = [1i32];
        mesh.group("dp")
            .unwrap()
            .allreduce(&mut x, ReduceOp::Sum)
            .unwrap();
        (a, b, x[0])
    });
    for (a, b, sum) in &out {
        assert!(a.contains("hold 6 ranks, but the group has 4"), "{a}");
        assert!(b.contains("\"dp\" is named twice"), "{b}");
        assert_eq!(*sum, 4);
    }
}
