//! The object collectives: [`all_gather_object`], [`broadcast_object`], [`gather_object`] and
//! [`scatter_object_list`], free functions over a group as torch.distributed keeps them
//! (`torch.distributed.all_gather_object(object_list, obj, group=None)`). An object is bytes,
//! serialised as the caller likes (PyTorch pickles); each function sends the lengths first,
//! then the bytes, through the group's own collectives, so it runs in issue order with them and
//! fails as they do.
//!
//! ```
//! let out = phalanx_testing::spawn_ranks(3, |pg| {
//!     let mine = format!("rank {}", pg.rank());
//!     let all = phalanx_pg::all_gather_object(&pg, mine.as_bytes()).unwrap();
//!     let root = phalanx_pg::broadcast_object(&pg, b"config", 0).unwrap();
//!     (all, root)
//! });
//! let (all, root) = &out[2];
//! assert_eq!(all, &[b"rank 0".to_vec(), b"rank 1".to_vec(), b"rank 2".to_vec()]);
//! assert_eq!(root, b"config");
//! ```

use crate::{P2POp, ProcessGroup, Result};

/// PyTorch's `all_gather_object`: every rank's bytes (its object, serialised as the caller
/// likes), in rank order, on every rank. Every backend runs it: the native one sends each
/// object at its own length (allgather_v); the others, which lack allgather_v, pad every
/// object to the longest, as PyTorch does for every backend.
pub fn all_gather_object(pg: &ProcessGroup, obj: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut lens = vec![0i64; pg.world_size()];
    pg.allgather(&[obj.len() as i64], &mut lens)?;
    let counts: Vec<usize> = lens.iter().map(|&l| l as usize).collect();
    if pg.backend() == "native" {
        let mut all = vec![0u8; counts.iter().sum()];
        pg.allgather_v(obj, &mut all, &counts)?;
        let mut out = Vec::with_capacity(counts.len());
        let mut rest = &all[..];
        for c in counts {
            let (o, tail) = rest.split_at(c);
            out.push(o.to_vec());
            rest = tail;
        }
        return Ok(out);
    }
    let longest = counts.iter().copied().max().unwrap_or(0);
    if longest == 0 {
        return Ok(vec![Vec::new(); counts.len()]);
    }
    let mut mine = obj.to_vec();
    mine.resize(longest, 0);
    let mut all = vec![0u8; longest * counts.len()];
    pg.allgather(&mine, &mut all)?;
    Ok(all
        .chunks(longest)
        .zip(counts)
        .map(|(o, c)| o[..c].to_vec())
        .collect())
}

/// PyTorch's `broadcast_object_list` for one object: `root`'s bytes on every rank (`obj` is
/// only read on the root).
pub fn broadcast_object(pg: &ProcessGroup, obj: &[u8], root: usize) -> Result<Vec<u8>> {
    pg.caller().rank(root, "broadcast_object root")?;
    let mut len = [obj.len() as i64];
    pg.broadcast(&mut len, root)?;
    let mut buf = if pg.rank() == root {
        obj.to_vec()
    } else {
        vec![0u8; len[0] as usize]
    };
    pg.broadcast(&mut buf, root)?;
    Ok(buf)
}

/// PyTorch's `gather_object`: every rank's bytes, in rank order, on `root` (`None`
/// elsewhere). Every backend, as [`all_gather_object`].
pub fn gather_object(pg: &ProcessGroup, obj: &[u8], root: usize) -> Result<Option<Vec<Vec<u8>>>> {
    pg.caller().rank(root, "gather_object root")?;
    let all = all_gather_object(pg, obj)?;
    Ok((pg.rank() == root).then_some(all))
}

/// PyTorch's `scatter_object_list`: object `p` of `root`'s `objs` (one per rank; only read on
/// the root) to rank `p`. Native backend only.
pub fn scatter_object_list(pg: &ProcessGroup, objs: &[Vec<u8>], root: usize) -> Result<Vec<u8>> {
    let caller = pg.caller();
    caller.rank(root, "scatter_object_list root")?;
    caller.scatter_objects(root, objs.len())?;
    let is_root = pg.rank() == root;
    let lens: Vec<i64> = if is_root {
        objs.iter().map(|o| o.len() as i64).collect()
    } else {
        Vec::new()
    };
    let mut len = [0i64];
    pg.scatter(&lens, &mut len, root)?;
    if is_root {
        let ops = (0..pg.world_size())
            .filter(|&p| p != root)
            .map(|p| P2POp::Send {
                buf: objs[p].clone(),
                peer: p,
                tag: 0,
            })
            .collect();
        pg.batch_isend_irecv(ops).wait()?;
        Ok(objs[root].clone())
    } else {
        let mut buf = vec![0u8; len[0] as usize];
        pg.recv(&mut buf, root, 0)?;
        Ok(buf)
    }
}
