//! Per-rank progress of the collectives, for hang diagnosis.
//!
//! Note [Hang diagnosis]: every rank remembers the sequence number of the last collective it
//! completed — one relaxed atomic store per collective, nothing on the wire. When a collective
//! fails, the rank publishes `status/<rank>` to the (per-round) store (`Shared::publish`,
//! Note [A failure's word is bounded]): on a timeout
//! `waiting in <fingerprint> for rank(s) [..]; last completed #N`, otherwise
//! `failed in <collective>; last completed #N`. The launcher reads these keys for every rank,
//! adds what it sees of its own workers (stopped, in disk wait, last output line), and names
//! the rank the others wait for that is not itself waiting: a stopped or hung rank publishes
//! nothing, and is found by elimination.

use std::sync::atomic::{AtomicU64, Ordering};

/// The last completed collective of this rank.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Sequence number + 1 of the last completed collective; 0 before the first.
    completed: AtomicU64,
}

impl Progress {
    /// Records that collective `seq` completed. On the fast path: a relaxed store.
    #[inline]
    pub(crate) fn complete(&self, seq: u64) {
        self.completed.store(seq + 1, Ordering::Relaxed);
    }

    /// The last completed collective's sequence number, if any.
    pub(crate) fn last_completed(&self) -> Option<u64> {
        self.completed.load(Ordering::Relaxed).checked_sub(1)
    }

    /// The `status/<rank>` text for a failure of collective `op` (its description).
    pub(crate) fn status(&self, e: &phalanx_transport::Error, op: &str) -> String {
        let last = match self.last_completed() {
            Some(n) => format!("last completed #{n}"),
            None => "no collective completed yet".to_string(),
        };
        match e {
            phalanx_transport::Error::Timeout {
                during,
                waiting_for,
                ..
            } => format!("waiting in {during} for rank(s) {waiting_for:?}; {last}"),
            _ => format!("failed in {op}; {last}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn status_names_the_ranks_waited_for_and_the_last_completed() {
        let p = Progress::default();
        assert_eq!(p.last_completed(), None);
        let timeout = phalanx_transport::Error::Timeout {
            during: "allreduce #7 sum f32 count=16".into(),
            waiting_for: vec![1, 3],
            after: Duration::from_secs(5),
        };
        assert_eq!(
            p.status(&timeout, "x"),
            "waiting in allreduce #7 sum f32 count=16 for rank(s) [1, 3]; no collective completed yet"
        );
        p.complete(6);
        assert_eq!(p.last_completed(), Some(6));
        assert_eq!(
            p.status(&timeout, "x"),
            "waiting in allreduce #7 sum f32 count=16 for rank(s) [1, 3]; last completed #6"
        );
        let aborted = phalanx_transport::Error::Aborted {
            reason: "rank 1: boom".into(),
        };
        assert_eq!(
            p.status(&aborted, "allreduce #7"),
            "failed in allreduce #7; last completed #6"
        );
    }
}
