//! Construction-time agreement: every rank must hold the same parameters (names, shapes, order),
//! and then rank 0's values of them.

use burn::module::Module;
use phalanx_pg::ProcessGroup;
use sha2::{Digest, Sha256};

use crate::adapter::burn::{
    discrete_to_bytes, params_to_flat, set_discrete_from_bytes, set_params_from_flat,
};
use crate::adapter::StateInfo;
use crate::buffers::split;
use crate::{Error, Result};

/// Checks that every rank has the same parameter list as rank 0. Cheap when they agree (one
/// allgather of an 8-byte hash); on a mismatch every rank exchanges its full list so that all of
/// them report the same first differing parameter and rank.
pub(crate) fn check_same_model(pg: &ProcessGroup, infos: &[StateInfo]) -> Result<()> {
    let desc = describe(infos);
    let digest = Sha256::digest(desc.as_bytes());
    let hash = i64::from_le_bytes(digest[..8].try_into().expect("sha256 has 32 bytes"));
    let world = pg.world_size();
    let mut hashes = vec![0i64; world];
    pg.allgather(&[hash], &mut hashes)
        .map_err(|source| Error::Setup {
            op: "allgather(model hash)",
            source,
        })?;
    if hashes.iter().all(|&h| h == hashes[0]) {
        return Ok(());
    }

    let mut lens = vec![0i64; world];
    pg.allgather(&[desc.len() as i64], &mut lens)
        .map_err(|source| Error::Setup {
            op: "allgather(model length)",
            source,
        })?;
    let max = lens.iter().copied().max().unwrap_or(0) as usize;
    let mut mine = desc.into_bytes();
    mine.resize(max, 0);
    let mut all = vec![0u8; max * world];
    pg.allgather(&mine, &mut all)
        .map_err(|source| Error::Setup {
            op: "allgather(model)",
            source,
        })?;
    let lists: Vec<Vec<String>> = all
        .chunks(max.max(1))
        .zip(&lens)
        .map(|(bytes, &len)| {
            String::from_utf8_lossy(&bytes[..len as usize])
                .lines()
                .map(str::to_string)
                .collect()
        })
        .collect();
    Err(
        first_difference(&lists).unwrap_or_else(|| Error::ModelMismatch {
            rank: hashes.iter().position(|&h| h != hashes[0]).unwrap_or(0),
            index: 0,
            ours: "a model with the same description".into(),
            theirs: "a different hash (hash collision or corrupted exchange)".into(),
        }),
    )
}

/// One line per tensor: `name [d0, d1] (kind)`.
fn describe(infos: &[StateInfo]) -> String {
    infos.iter().map(|i| format!("{i}\n")).collect()
}

/// The first rank whose list differs from rank 0's, and the first differing position.
fn first_difference(lists: &[Vec<String>]) -> Option<Error> {
    let ours = lists.first()?;
    for (rank, theirs) in lists.iter().enumerate().skip(1) {
        if theirs == ours {
            continue;
        }
        let index = (0..ours.len().max(theirs.len()))
            .find(|&i| ours.get(i) != theirs.get(i))
            .unwrap_or(0);
        let show = |l: &Vec<String>| l.get(index).cloned().unwrap_or_else(|| "nothing".into());
        return Some(Error::ModelMismatch {
            rank,
            index,
            ours: show(ours),
            theirs: show(theirs),
        });
    }
    None
}

/// PyTorch broadcasts module state at construction in buckets of 250 MiB.
const BROADCAST_BUCKET_BYTES: usize = 250 * 1024 * 1024;

/// Broadcasts rank 0's values of every tensor of the model to every rank: floats in pieces of
/// 250 MiB, then the int and bool tensors' bytes.
pub(crate) fn broadcast_state<M: Module>(
    pg: &ProcessGroup,
    module: M,
    states: &[StateInfo],
) -> Result<M> {
    let values = params_to_flat(&module)?;
    let lens: Vec<usize> = values.iter().map(Vec::len).collect();
    let mut flat: Vec<f32> = values.into_iter().flatten().collect();
    for chunk in flat.chunks_mut(BROADCAST_BUCKET_BYTES / 4) {
        pg.broadcast(chunk, 0).map_err(|source| Error::Setup {
            op: "broadcast(parameters and buffers)",
            source,
        })?;
    }
    let module = set_params_from_flat(module, &split(&flat, lens.into_iter()))?;
    broadcast_discrete(pg, module, states)
}

/// Broadcasts float tensor `k` of `module` (canonical order) from rank 0 into `values`,
/// which holds this rank's value of it, in pieces of 250 MiB: one tensor at a time, so that
/// a sharded model is made equal without a second copy of it (`fsdp`).
pub(crate) fn broadcast_float(pg: &ProcessGroup, values: &mut [f32]) -> Result<()> {
    for chunk in values.chunks_mut(BROADCAST_BUCKET_BYTES / 4) {
        pg.broadcast(chunk, 0).map_err(|source| Error::Setup {
            op: "broadcast(parameters and buffers)",
            source,
        })?;
    }
    Ok(())
}

/// Broadcasts rank 0's int and bool tensors to every rank (nothing when there are none).
pub(crate) fn broadcast_discrete<M: Module>(
    pg: &ProcessGroup,
    module: M,
    states: &[StateInfo],
) -> Result<M> {
    if states.iter().all(|s| s.kind.is_float()) {
        return Ok(module);
    }
    let pieces = discrete_to_bytes(&module);
    let lens: Vec<usize> = pieces.iter().map(Vec::len).collect();
    let mut bytes: Vec<u8> = pieces.into_iter().flatten().collect();
    pg.broadcast(&mut bytes, 0).map_err(|source| Error::Setup {
        op: "broadcast(int and bool tensors)",
        source,
    })?;
    Ok(set_discrete_from_bytes(
        module,
        split(&bytes, lens.into_iter()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::adapter::{ParamInfo, StateKind};

    fn info(name: &str, shape: &[usize]) -> StateInfo {
        StateInfo {
            info: ParamInfo {
                name: name.into(),
                shape: shape.to_vec(),
            },
            kind: StateKind::Trainable,
        }
    }

    fn lines(infos: &[StateInfo]) -> Vec<String> {
        describe(infos).lines().map(str::to_string).collect()
    }

    #[test]
    fn names_the_first_differing_parameter_and_rank() {
        let a = [info("l.0.weight", &[4, 8]), info("l.0.bias", &[8])];
        let b = [info("l.0.weight", &[4, 9]), info("l.0.bias", &[9])];
        let err = first_difference(&[lines(&a), lines(&a), lines(&b)]).unwrap();
        let msg = err.to_string();
        assert!(msg.contains("rank 2"), "{msg}");
        assert!(
            msg.contains("l.0.weight [4, 9] (parameter)") && msg.contains("l.0.weight [4, 8]"),
            "{msg}"
        );
        assert!(msg.contains("#0"), "{msg}");
    }

    #[test]
    fn a_missing_parameter_shows_as_nothing() {
        let a = [info("w", &[2]), info("b", &[2])];
        let err = first_difference(&[lines(&a), lines(&a[..1])]).unwrap();
        assert!(
            err.to_string()
                .contains("rank 1 has nothing where rank 0 has b [2] (parameter)"),
            "{err}"
        );
    }

    #[test]
    fn same_lists_agree() {
        let a = [info("w", &[2])];
        assert!(first_difference(&[lines(&a), lines(&a)]).is_none());
    }
}
