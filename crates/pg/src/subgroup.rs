//! Subgroups: [`new_group`] (PyTorch's `dist.new_group(ranks)`), [`split_group`] (MPI's
//! `Comm_split`: a color and a key per rank) and [`new_subgroups`] (consecutive groups of one
//! size, or one per host).
//!
//! A subgroup is a process group of its own: its ranks are numbered `0..len` in the order
//! given, it has its own collective sequence and fingerprints, and its own connections among
//! its members (made through the parent's store under `group/<k>/`), so collectives of
//! several subgroups and of the world run at the same time, on different threads, without
//! mixing. Every rank of the parent calls each subgroup function, in the same order and with
//! the same arguments (checked: a rank that disagrees is named); ranks outside the new group
//! get `None`. Errors in a subgroup name it with the job's ranks. DDP takes a subgroup like
//! any group (hybrid data parallelism: replicate across one axis).
//!
//! ```
//! use phalanx_core::ReduceOp;
//! let sums = phalanx_testing::spawn_ranks(4, |pg| {
//!     // Even and odd ranks, each their own group.
//!     let evens = phalanx_pg::new_group(&pg, &[0, 2]).unwrap();
//!     let odds = phalanx_pg::new_group(&pg, &[1, 3]).unwrap();
//!     let sub = evens.or(odds).unwrap();
//!     let mut x = [pg.rank() as f32];
//!     sub.allreduce(&mut x, ReduceOp::Sum).unwrap();
//!     x[0]
//! });
//! assert_eq!(sums, vec![2.0, 4.0, 2.0, 4.0]);
//! ```

use std::sync::{atomic::Ordering, Arc};

use phalanx_store::{PrefixStore, Store};

use crate::{placement::Placement, Error, ProcessGroup, Result};

fn usage(pg: &ProcessGroup, op: &str, cause: String) -> Error {
    Error::Collective {
        rank: pg.rank(),
        op: op.to_string(),
        cause,
    }
}

/// The group of `ranks` (this group's numbering; subgroup rank `i` is `ranks[i]`), or `None`
/// on a rank outside it. Every rank of `pg` calls it with the same `ranks`.
pub fn new_group(pg: &ProcessGroup, ranks: &[usize]) -> Result<Option<ProcessGroup>> {
    let k = next_subgroup(pg, "new_group")?;
    pg.caller().subgroup_ranks("new_group", ranks)?;
    agree(
        pg,
        &format!("group/{k}/ranks"),
        "ranks",
        &format!("{ranks:?}"),
        "new_group",
    )?;
    join(pg, &format!("group/{k}"), ranks)
}

/// Splits this group by `color`: ranks with the same color form a group, ordered by `key`
/// (then by rank); a rank with color `None` joins none and gets `None`. Every rank of `pg`
/// calls it (a collective of `pg`).
pub fn split_group(
    pg: &ProcessGroup,
    color: Option<u32>,
    key: i64,
) -> Result<Option<ProcessGroup>> {
    let k = next_subgroup(pg, "split_group")?;
    let mine = [color.map_or(-1, i64::from), key];
    let mut all = vec![0i64; 2 * pg.world_size()];
    pg.allgather(&mine, &mut all)?;
    let Some(color) = color else {
        return Ok(None);
    };
    let mut members: Vec<(i64, usize)> = all
        .chunks(2)
        .enumerate()
        .filter(|(_, ck)| ck[0] == i64::from(color))
        .map(|(r, ck)| (ck[1], r))
        .collect();
    members.sort_unstable();
    let ranks: Vec<usize> = members.into_iter().map(|(_, r)| r).collect();
    join(pg, &format!("group/{k}/color/{color}"), &ranks)
}

/// Consecutive groups of `group_size` ranks (`[0, size)`, `[size, 2·size)`, …; PyTorch's
/// `new_subgroups`): this rank's group. `group_size` must divide the world size.
pub fn new_subgroups(pg: &ProcessGroup, group_size: usize) -> Result<ProcessGroup> {
    pg.caller().subgroup_size(group_size)?;
    let color = (pg.rank() / group_size) as u32;
    Ok(split_group(pg, Some(color), pg.rank() as i64)?.expect("every rank has a color"))
}

/// One group per host: the ranks that share this rank's host (and memory).
pub fn new_subgroups_by_host(pg: &ProcessGroup) -> Result<ProcessGroup> {
    let Some(seed) = pg.seed() else {
        return Err(not_native(pg, "new_subgroups_by_host"));
    };
    // Hosts are numbered alike on every rank (Note [A table read in place] in bootstrap/table.rs).
    let color = seed.hosts[pg.rank()];
    Ok(split_group(pg, Some(color), pg.rank() as i64)?.expect("every rank has a color"))
}

fn not_native(pg: &ProcessGroup, op: &str) -> Error {
    Error::Backend {
        backend: pg.backend(),
        reason: format!(
            "rank {}: {op} is not offered by the {} backend yet; the native backend makes \
             subgroups",
            pg.rank(),
            pg.backend()
        ),
    }
}

/// The number of this subgroup among `pg`'s, the same on every rank.
pub(crate) fn next_subgroup(pg: &ProcessGroup, op: &str) -> Result<u64> {
    let seed = pg.seed().ok_or_else(|| not_native(pg, op))?;
    Ok(seed.made.fetch_add(1, Ordering::Relaxed))
}

/// Every rank must ask for the same thing (`what`: `mine`): the first request is kept in the
/// store, and one small allreduce of `pg` tells every rank whether all agreed, so that no rank
/// goes on to wait for members that will never come. The rank that disagreed names both
/// requests.
pub(crate) fn agree(pg: &ProcessGroup, key: &str, what: &str, mine: &str, op: &str) -> Result<()> {
    let store_err = |source| Error::Store {
        rank: pg.rank(),
        source,
    };
    let got = pg
        .store()
        .compare_set(key, b"", mine.as_bytes())
        .map_err(store_err)?;
    let mut all_agree = [i32::from(got == mine.as_bytes())];
    pg.allreduce(&mut all_agree, phalanx_core::ReduceOp::Min)?;
    if got != mine.as_bytes() {
        return Err(usage(
            pg,
            op,
            format!(
                "this rank asked for {what} {mine} but another rank asked for {} (every rank \
                 calls {op} with the same {what}, in the same order)",
                String::from_utf8_lossy(&got)
            ),
        ));
    }
    if all_agree[0] == 0 {
        return Err(usage(
            pg,
            op,
            format!("another rank asked for other {what} than {mine} (its error names both)"),
        ));
    }
    Ok(())
}

/// Connects the members of `ranks` (this group's numbering) under store prefix `prefix`.
fn join(pg: &ProcessGroup, prefix: &str, ranks: &[usize]) -> Result<Option<ProcessGroup>> {
    let seed = pg.seed().ok_or_else(|| not_native(pg, "new_group"))?;
    let Some(me) = ranks.iter().position(|&r| r == pg.rank()) else {
        return Ok(None);
    };
    let host = seed.hosts[pg.rank()];
    let same_host: Vec<usize> = ranks
        .iter()
        .enumerate()
        .filter(|(_, &r)| seed.hosts[r] == host)
        .map(|(i, _)| i)
        .collect();
    let placement = Placement {
        rank: me,
        world_size: ranks.len(),
        local_rank: same_host.iter().position(|&i| i == me).expect("this rank"),
        local_world_size: same_host.len(),
        node_rank: seed.node_rank,
    };
    let store: Arc<dyn Store> = Arc::new(PrefixStore::new(prefix.to_string(), pg.store().clone()));
    let mut sub = crate::connect(
        placement,
        store,
        None,
        &seed.auth,
        seed.timeout,
        seed.ip,
        seed.opts.clone(),
    )?;
    sub.set_job_ranks(ranks.iter().map(|&r| pg.job_rank(r)).collect());
    // A subgroup of a fault-tolerant generation fails as its parent does.
    if pg.is_fault_tolerant() {
        sub.set_fault_tolerant();
    }
    Ok(Some(sub))
}
