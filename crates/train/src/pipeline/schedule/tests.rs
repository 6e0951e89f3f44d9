//! The schedules' tests, with the two models of the transport their programs run through: one
//! where a message moves only when both ends wait for it, one where a send completes at once
//! (Note [Schedules as data]).

use super::*;
use std::collections::HashMap;

/// Runs every rank's program, lowered as `lowering` says, against a transport in which a
/// message moves only when its sender and receiver both wait for it, stepping each
/// exchange as `send_recv_batch` does (the k-th send to and receive from each peer in
/// step k). Returns whether every program ran to its end.
fn runs_to_the_end(s: &Schedule, lowering: Lowering) -> bool {
    // Each rank's program as steps of posted operations (sends, receives).
    type Step = (Vec<Message>, Vec<Message>);
    let steps_of = |rank: usize| -> Vec<Step> {
        let mut out = Vec::new();
        for instr in s.program(rank, lowering) {
            let Instr::Exchange { sends, recvs } = instr else {
                continue;
            };
            let mut by_step: Vec<Step> = Vec::new();
            let mut count: HashMap<(usize, bool), usize> = HashMap::new();
            for (msg, is_send) in sends
                .iter()
                .map(|m| (*m, true))
                .chain(recvs.iter().map(|m| (*m, false)))
            {
                let peer = match is_send {
                    true => s.rank_of(msg.to()),
                    false => s.rank_of(msg.from),
                };
                let k = count.entry((peer, is_send)).or_default();
                if by_step.len() <= *k {
                    by_step.resize(*k + 1, (Vec::new(), Vec::new()));
                }
                match is_send {
                    true => by_step[*k].0.push(msg),
                    false => by_step[*k].1.push(msg),
                }
                *k += 1;
            }
            out.extend(by_step);
        }
        out
    };
    let programs: Vec<Vec<Step>> = (0..s.ranks()).map(steps_of).collect();
    let mut pc = vec![0usize; s.ranks()];
    let mut done: Vec<HashSet<(Message, bool)>> = vec![HashSet::new(); s.ranks()];
    loop {
        if (0..s.ranks()).all(|r| pc[r] == programs[r].len()) {
            return true;
        }
        let mut moved = false;
        for r in 0..s.ranks() {
            let Some((sends, _)) = programs[r].get(pc[r]) else {
                continue;
            };
            for msg in sends {
                let to = s.rank_of(msg.to());
                let waiting = programs[to]
                    .get(pc[to])
                    .is_some_and(|(_, recvs)| recvs.contains(msg));
                if waiting && !done[r].contains(&(*msg, true)) {
                    done[r].insert((*msg, true));
                    done[to].insert((*msg, false));
                    moved = true;
                }
            }
        }
        for r in 0..s.ranks() {
            let Some((sends, recvs)) = programs[r].get(pc[r]) else {
                continue;
            };
            let complete = sends.iter().all(|m| done[r].contains(&(*m, true)))
                && recvs.iter().all(|m| done[r].contains(&(*m, false)));
            if complete {
                pc[r] += 1;
                moved = true;
            }
        }
        if !moved {
            return false;
        }
    }
}

/// Runs every rank's program, lowered as `lowering` says, against a transport in which a
/// send completes at once and a receive waits for its message to be sent (Note [Sends
/// that read] in phalanx-transport). Returns whether every program ran to its end.
fn runs_with_sends_that_complete_alone(s: &Schedule, lowering: Lowering) -> bool {
    let programs: Vec<Vec<Instr>> = (0..s.ranks()).map(|r| s.program(r, lowering)).collect();
    let mut pc = vec![0usize; s.ranks()];
    let mut sent: HashSet<Message> = HashSet::new();
    loop {
        let mut moved = false;
        for r in 0..s.ranks() {
            while let Some(instr) = programs[r].get(pc[r]) {
                if let Instr::Exchange { sends, recvs } = instr {
                    sent.extend(sends.iter().copied());
                    if !recvs.iter().all(|m| sent.contains(m)) {
                        break;
                    }
                }
                pc[r] += 1;
                moved = true;
            }
        }
        if (0..s.ranks()).all(|r| pc[r] == programs[r].len()) {
            return true;
        }
        if !moved {
            return false;
        }
    }
}

/// Each pair's messages in the order its sender sends them and in the order its receiver
/// takes them, by (sender, receiver).
fn pair_orders(s: &Schedule, lowering: Lowering) -> [HashMap<(usize, usize), Vec<Message>>; 2] {
    let mut orders = [HashMap::new(), HashMap::new()];
    for rank in 0..s.ranks() {
        for instr in s.program(rank, lowering) {
            let Instr::Exchange { sends, recvs } = instr else {
                continue;
            };
            for msg in sends {
                let pair = (rank, s.rank_of(msg.to()));
                orders[0].entry(pair).or_insert_with(Vec::new).push(msg);
            }
            for msg in recvs {
                let pair = (s.rank_of(msg.from), rank);
                orders[1].entry(pair).or_insert_with(Vec::new).push(msg);
            }
        }
    }
    orders
}

fn shapes() -> Vec<Schedule> {
    let mut all = Vec::new();
    for p in 1..=6 {
        for m in 1..=12 {
            for kind in [PipelineSchedule::Gpipe, PipelineSchedule::OneFOneB] {
                all.push(Schedule::new(kind, p, 1, m).unwrap());
            }
            for v in 2..=3 {
                if let Ok(s) = Schedule::new(PipelineSchedule::Interleaved, p, v, m) {
                    all.push(s);
                }
            }
        }
    }
    all
}

#[test]
fn every_program_runs_to_its_end_without_a_deadlock() {
    for s in shapes() {
        assert!(runs_to_the_end(&s, Lowering::LockStep), "{s:?} deadlocks");
        for lowering in [Lowering::LockStep, Lowering::AsNeeded] {
            assert!(
                runs_with_sends_that_complete_alone(&s, lowering),
                "{s:?} {lowering:?} deadlocks where sends complete alone"
            );
        }
    }
}

/// Why MPI and NCCL keep the lock-step lowering: where a send waits for its receive, an
/// as-needed program of interleaved 1F1B deadlocks (Note [Schedules as data]).
#[test]
fn an_as_needed_program_needs_sends_that_complete_alone() {
    let s = Schedule::new(PipelineSchedule::Interleaved, 2, 2, 8).unwrap();
    assert!(!runs_to_the_end(&s, Lowering::AsNeeded));
    assert!(runs_to_the_end(&s, Lowering::LockStep));
}

/// The transport matches each pair's messages in order: every sender sends its messages
/// to a peer in the order that peer receives them, and each once.
#[test]
fn every_pair_receives_in_the_order_it_was_sent() {
    for s in shapes() {
        for lowering in [Lowering::LockStep, Lowering::AsNeeded] {
            let [sent, received] = pair_orders(&s, lowering);
            assert_eq!(sent, received, "{s:?} {lowering:?}");
            let mut all: Vec<Message> = sent.into_values().flatten().collect();
            let count = all.len();
            all.sort_by_key(|m| (m.grad, m.from, m.mb));
            all.dedup();
            assert_eq!(all.len(), count, "{s:?} {lowering:?}: a message sent twice");
        }
    }
}

#[test]
fn every_stage_runs_each_microbatch_forward_then_backward_once() {
    for s in shapes() {
        for rank in 0..s.ranks() {
            let actions = s.actions(rank);
            assert_eq!(actions.len(), 2 * s.chunks() * s.microbatches(), "{s:?}");
            for chunk in 0..s.chunks() {
                for mb in 0..s.microbatches() {
                    let at = |a| actions.iter().position(|x| *x == a);
                    let f = at(Action::Forward { chunk, mb }).expect("a forward");
                    let b = at(Action::Backward { chunk, mb }).expect("a backward");
                    assert!(f < b, "{s:?} rank {rank}: backward before forward");
                }
            }
        }
    }
}

/// Every rank ends on the backward of the last microbatch through its first chunk: the
/// gradient that brings it the whole batch's loss (Note [The loss rides with the
/// gradients] in stage.rs).
#[test]
fn every_rank_ends_on_the_last_microbatchs_backward_through_its_first_chunk() {
    for s in shapes() {
        for rank in 0..s.ranks() {
            let last = *s.actions(rank).last().unwrap();
            let mb = s.microbatches() - 1;
            assert_eq!(last, Action::Backward { chunk: 0, mb }, "{s:?} rank {rank}");
        }
    }
}

#[test]
fn one_f_one_b_holds_at_most_p_microbatches() {
    let s = Schedule::new(PipelineSchedule::OneFOneB, 4, 1, 8).unwrap();
    for rank in 0..4 {
        let (mut live, mut most) = (0i32, 0);
        for a in s.actions(rank) {
            live += match a {
                Action::Forward { .. } => 1,
                Action::Backward { .. } => -1,
            };
            most = most.max(live);
        }
        assert_eq!(most as usize, 4 - rank, "rank {rank}");
    }
}

#[test]
fn bad_shapes_are_named() {
    let e = Schedule::new(PipelineSchedule::Interleaved, 2, 1, 4).unwrap_err();
    assert!(e.contains("--virtual-stages 1 must be at least 2"), "{e}");
    let e = Schedule::new(PipelineSchedule::Interleaved, 4, 2, 9).unwrap_err();
    assert!(
        e.contains("--microbatches 9 does not split into 2 equal rounds"),
        "{e}"
    );
    let e = Schedule::new(PipelineSchedule::OneFOneB, 2, 2, 4).unwrap_err();
    assert!(e.contains("needs --pp-schedule interleaved"), "{e}");
    assert!("zero"
        .parse::<PipelineSchedule>()
        .unwrap_err()
        .contains("gpipe, 1f1b"));
}

/// PyTorch's rule (Note [Rounds of microbatches]): one round below `2p`, else rounds of
/// equal size; Megatron's rounds of `p` where `m` is a multiple of it.
#[test]
fn interleaved_rounds_are_pytorchs() {
    let fits: Vec<usize> = (1..=13).filter(|&m| interleaved_fits(4, m)).collect();
    assert_eq!(fits, [1, 2, 3, 4, 5, 6, 7, 8, 10, 12]);
    let per_round = |m| {
        Schedule::new(PipelineSchedule::Interleaved, 4, 2, m)
            .unwrap()
            .per_round()
    };
    assert_eq!(
        [1, 3, 4, 6, 8, 10, 12].map(per_round),
        [1, 3, 4, 6, 4, 5, 4]
    );
    // A round of 3 on 2 ranks: the first chunk takes microbatches 0-2, then the second.
    let s = Schedule::new(PipelineSchedule::Interleaved, 2, 2, 3).unwrap();
    let forwards: Vec<Action> = s
        .actions(1)
        .into_iter()
        .filter(|a| matches!(a, Action::Forward { .. }))
        .collect();
    let f = |chunk, mb| Action::Forward { chunk, mb };
    assert_eq!(
        forwards,
        [f(0, 0), f(0, 1), f(0, 2), f(1, 0), f(1, 1), f(1, 2)]
    );
    // Rounds of p: Megatron's order, unchanged.
    let s = Schedule::new(PipelineSchedule::Interleaved, 2, 2, 4).unwrap();
    let f = |chunk, mb| Action::Forward { chunk, mb };
    assert_eq!(
        s.actions(0)[..6],
        [
            f(0, 0),
            f(0, 1),
            f(1, 0),
            f(1, 1),
            f(0, 2),
            Action::Backward { chunk: 1, mb: 0 }
        ]
    );
}

#[test]
fn the_bubble_in_theory() {
    let s = Schedule::new(PipelineSchedule::OneFOneB, 2, 1, 8).unwrap();
    assert!((s.bubble() - 1.0 / 9.0).abs() < 1e-12);
    let s = Schedule::new(PipelineSchedule::Interleaved, 2, 2, 8).unwrap();
    assert!((s.bubble() - 1.0 / 17.0).abs() < 1e-12);
    // One round of fewer microbatches than ranks: the 4 chunks of one microbatch run one
    // after another, so each rank waits half the step.
    let s = Schedule::new(PipelineSchedule::Interleaved, 2, 2, 1).unwrap();
    assert!((s.bubble() - 0.5).abs() < 1e-12);
    // p = 4, v = 2, m = 2: (3 + 2) / (4 + 3 + 2).
    let s = Schedule::new(PipelineSchedule::Interleaved, 4, 2, 2).unwrap();
    assert!((s.bubble() - 5.0 / 9.0).abs() < 1e-12);
    // Without chunks, fewer microbatches change nothing but m.
    let s = Schedule::new(PipelineSchedule::OneFOneB, 4, 1, 2).unwrap();
    assert!((s.bubble() - 3.0 / 5.0).abs() < 1e-12);
}
