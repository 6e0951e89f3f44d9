//! Taking the training state from a healthy peer after the process group was re-formed
//! (`phalanx launch --fault-tolerance`; Note [FT generations] in `phalanx-pg`).
//!
//! Note [A regroup]: every rank of the new generation calls [`resync`] at once. Each says which
//! step its state belongs to (a replacement: none); the rank with the newest state (the
//! lowest such rank on a tie) sends its position, optimizer state and every tensor of the
//! model (parameters, buffers, int and bool tensors), and the others take them. When every
//! rank holds the same step (the group only shrank) nothing is sent. Survivors may
//! disagree by one step: a rank whose collective completed just before the death updated its
//! parameters, a rank whose collective failed did not; the newest state is a correct one,
//! because a step's update happens only after all of that step's collectives completed
//! (the trainer uses the unfused step under fault tolerance: a fused one updates bucket by
//! bucket and could leave a half-updated model). Afterwards every replica is bitwise equal
//! and the run continues from that position with the data order of an uninterrupted run.

use phalanx_checkpoint::position::{Handover, Position};
use phalanx_ddp::adapter::burn as adapter;
use phalanx_pg::ProcessGroup;

use crate::{Classifier, Error, Optim, Result};

/// Makes every rank's model, optimizer and position equal to the newest ones held by any rank
/// (Note [A regroup]); `held` is this rank's position, `None` for a replacement. With
/// `keep_own`, a rank that holds the newest step keeps its own state: islands under `--outer`
/// differ between syncs, and each whole island goes on with its own (Note [Islands that leave
/// and join] in phalanx-ddp). Returns the model, the position and the source rank. A
/// collective of the new group.
pub(crate) fn resync<M: Classifier>(
    pg: &ProcessGroup,
    model: &M,
    optim: &mut Optim,
    held: Option<Position>,
    keep_own: bool,
) -> Result<(M, Position, usize)> {
    let mine = held.map_or(-1, |p| p.global_step as i64);
    let mut all = vec![0i64; pg.world_size()];
    pg.allgather(&[mine], &mut all)?;
    let (source, newest) = all
        .iter()
        .enumerate()
        .max_by_key(|&(r, &step)| (step, std::cmp::Reverse(r)))
        .map(|(r, &s)| (r, s))
        .expect("a group has at least one rank");
    if newest < 0 {
        return Err(Error::Config(
            "fault tolerance: no rank of the new process group holds the training state (every \
             rank is a replacement)"
                .into(),
        ));
    }
    if all.iter().all(|&step| step == newest) {
        // Every rank holds the same step, so the same state (replicas are bitwise equal after
        // every step): the group shrank, nobody needs anything.
        return Ok((
            model.clone(),
            held.expect("a rank with a step holds it"),
            source,
        ));
    }
    let sending = pg.rank() == source;
    let infos = adapter::param_infos(model);
    let (mut floats, optim_state, mut discrete) = if sending {
        let state = optim
            .state_bytes()
            .map_err(|e| Error::Config(format!("reading the optimizer state: {e}")))?;
        (
            adapter::params_to_flat(model)?.concat(),
            state,
            adapter::discrete_to_bytes(model).concat(),
        )
    } else {
        let discrete: usize = adapter::discrete_to_bytes(model).iter().map(Vec::len).sum();
        (
            vec![0.0f32; infos.iter().map(|i| i.numel()).sum()],
            None,
            vec![0u8; discrete],
        )
    };
    let handover = Handover {
        position: held,
        optim_bytes: optim_state.as_ref().map(Vec::len),
    }
    .broadcast(pg, source)?;
    let optim_state = handover.broadcast_optim_state(pg, source, optim_state)?;
    pg.broadcast(&mut floats, source)?;
    if !discrete.is_empty() {
        pg.broadcast(&mut discrete, source)?;
    }
    let position = handover
        .position
        .expect("the source holds the newest step: a position");
    if sending || (keep_own && mine == newest) {
        return Ok((model.clone(), position, source));
    }
    // Everything arrived: only now is this rank's state replaced, so a failure above leaves
    // it as it was for the next attempt.
    let mut values = Vec::with_capacity(infos.len());
    let mut at = 0;
    for info in &infos {
        values.push(floats[at..at + info.numel()].to_vec());
        at += info.numel();
    }
    let mut model = adapter::set_params_from_flat(model.clone(), &values)?;
    let sizes: Vec<usize> = adapter::discrete_to_bytes(&model)
        .iter()
        .map(Vec::len)
        .collect();
    if !sizes.is_empty() {
        let mut at = 0;
        let bytes = sizes
            .iter()
            .map(|&n| {
                at += n;
                discrete[at - n..at].to_vec()
            })
            .collect();
        model = adapter::set_discrete_from_bytes(model, bytes);
    }
    *optim = Optim::new(*optim.options());
    if let Some(state) = optim_state {
        optim
            .load_state(state)
            .map_err(|e| Error::Config(format!("rank {source}'s optimizer state: {e}")))?;
    }
    Ok((model, position, source))
}
