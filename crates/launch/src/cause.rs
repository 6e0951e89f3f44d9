//! Which of a round's near-simultaneous worker failures is the root cause (Note [Which failure
//! came first]): the agent waits a short window for the failures a first one caused, then
//! names the SIGKILLed rank if there is one, else the earliest.

use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use crate::worker::{record, Exit, Exited, Worker};

/// How long after a worker's failure the agent still takes its other workers' failures into
/// account in naming the first (Note [Which failure came first]).
const CAUSE_WINDOW: Duration = Duration::from_millis(100);

/// Note [Which failure came first]: when a rank dies, the process group fails every other rank
/// at once (Note [Fail fast]), and they exit within milliseconds of it. Each worker has its
/// own waiter thread, and on a busy machine the dead rank's waiter can be scheduled after the
/// waiter of a rank that exited because of it: the first exit event is not always the first
/// exit. So the agent takes the failures of the next `CAUSE_WINDOW` (or until every worker has
/// ended) into account too, and names the rank that SIGKILL ended, if one did, else the
/// earliest. SIGKILL cannot be a rank's reaction to a peer's failure: it is sent from outside
/// (the OOM killer, a user, a scheduler), and the agent sends none before it has chosen.
/// Errors and other signals (an abort, a segfault) can be either, and keep their order, which
/// is the order their waiters saw them: `at` is taken after `wait` returns, so among those the
/// same scheduling can still put a consequence first (the worker's own `error.json` timestamp
/// would order them better). A signal the agent receives during the window does not change
/// the choice (Slurm's is checked only before it). The
/// failures not chosen go back into the channel, so that `--fault-tolerance` replaces each.
/// Returns the local rank of the failure chosen, recorded on its worker.
pub(crate) fn first_failure(
    workers: &mut [Worker],
    (tx, rx): (&Sender<Exited>, &Receiver<Exited>),
    first: Exited,
) -> u32 {
    let running = workers.iter().filter(|w| w.exit.is_none()).count();
    let deadline = Instant::now() + CAUSE_WINDOW;
    let mut seen = vec![first];
    while seen.len() < running {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(ev) => seen.push(ev),
            Err(_) => break,
        }
    }
    let chosen = seen.swap_remove(first_cause(&seen));
    let lr = chosen.local_rank;
    record(workers, chosen);
    for ev in seen {
        // the `Round` holds the receiver for as long as this sender is used.
        let _ = tx.send(ev);
    }
    lr
}

/// The index of the root cause among exit events, the first of them a failure (Note [Which
/// failure came first]): the earliest SIGKILL, else the earliest failure.
fn first_cause(events: &[Exited]) -> usize {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| !e.exit.success())
        .min_by_key(|(_, e)| (e.exit != Exit::Signal(libc::SIGKILL), e.at))
        .map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(local_rank: u32, exit: Exit, ms: u64, t0: Instant) -> Exited {
        Exited {
            local_rank,
            exit,
            at: t0 + Duration::from_millis(ms),
        }
    }

    #[test]
    fn a_sigkill_is_the_cause_of_the_errors_around_it() {
        let t0 = Instant::now();
        // The waiter of the killed rank 0 was scheduled after rank 2's, which failed on it.
        let events = [
            exited(2, Exit::Code(1), 0, t0),
            exited(1, Exit::Code(1), 1, t0),
            exited(0, Exit::Signal(libc::SIGKILL), 3, t0),
        ];
        assert_eq!(events[first_cause(&events)].local_rank, 0);
    }

    #[test]
    fn without_a_sigkill_the_earliest_failure_is_the_cause() {
        let t0 = Instant::now();
        let events = [
            exited(1, Exit::Code(1), 2, t0),
            exited(0, Exit::Code(0), 0, t0),
            exited(3, Exit::Signal(libc::SIGABRT), 1, t0),
            exited(2, Exit::Code(1), 5, t0),
        ];
        // A success is never the cause, and an abort keeps its place in time.
        assert_eq!(events[first_cause(&events)].local_rank, 3);
        let two_kills = [
            exited(1, Exit::Code(1), 0, t0),
            exited(2, Exit::Signal(libc::SIGKILL), 4, t0),
            exited(0, Exit::Signal(libc::SIGKILL), 2, t0),
        ];
        assert_eq!(two_kills[first_cause(&two_kills)].local_rank, 0);
    }
}
