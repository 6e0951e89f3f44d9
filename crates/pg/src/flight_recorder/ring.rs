//! The flight recorder's ring: the groups of this process and the last `capacity` operations
//! they ran, recorded as they finish (Note [Flight recorder]). What an entry is and how it is
//! recorded; nothing here reads the environment or writes a file.

use std::time::Duration;

use phalanx_core::DType;

use super::clock::Clock;

/// What one collective moves: element type and counts, and the peer of a point-to-point one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) dtype: DType,
    /// Elements of the input buffer (the whole buffer for the `_v` collectives, whose
    /// per-rank shares differ while the whole is the same everywhere).
    pub(crate) input: usize,
    /// Elements of the output buffer.
    pub(crate) output: usize,
    /// The other rank of a send or receive, in the group's numbering.
    pub(crate) peer: Option<usize>,
}

impl Shape {
    /// `input` elements in, `output` out, of `T`.
    pub(crate) fn of<T: phalanx_core::Element>(input: usize, output: usize) -> Shape {
        Shape {
            dtype: T::DTYPE,
            input,
            output,
            peer: None,
        }
    }

    /// A barrier: no data (PyTorch records it as one element).
    pub(crate) fn none() -> Shape {
        Shape {
            dtype: DType::U8,
            input: 0,
            output: 0,
            peer: None,
        }
    }

    /// `n` elements of `T` to or from `peer`.
    pub(crate) fn p2p<T: phalanx_core::Element>(n: usize, peer: usize) -> Shape {
        Shape {
            peer: Some(peer),
            ..Shape::of::<T>(n, n)
        }
    }

    /// The larger buffer's bytes (what traces and the algorithm choice are told).
    pub(crate) fn bytes(&self) -> usize {
        self.input.max(self.output) * self.dtype.size()
    }
}

/// A group's handle in the recorder.
pub(crate) type GroupId = u32;

/// An operation that started running: when (in `clock::ticks`); nothing is locked or written yet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started(pub(super) u64);

/// What finished: operation `op` of group `pg`, a collective numbered `seq`, or a
/// point-to-point operation (`seq` is then the group's next collective, as in PyTorch).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Op {
    pub(crate) pg: GroupId,
    pub(crate) seq: u64,
    pub(crate) is_p2p: bool,
    pub(crate) name: &'static str,
    pub(crate) shape: Shape,
}

/// Where an entry stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    Started,
    Completed,
}

/// One operation, as the dump shows it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) record_id: u64,
    pub(super) pg: u32,
    pub(super) collective_seq: u64,
    pub(super) p2p_seq: u64,
    pub(super) is_p2p: bool,
    pub(super) op: &'static str,
    pub(super) shape: Shape,
    /// `clock::ticks` when it started and completed (0: not completed).
    pub(super) created: u64,
    pub(super) completed: u64,
    pub(super) state: State,
}

/// A process group this process is in.
#[derive(Debug)]
pub(super) struct Group {
    /// PyTorch's group name: the order groups were made in this process (`"0"` is the world).
    pub(super) name: String,
    pub(super) ranks: Vec<usize>,
    pub(super) rank: usize,
    pub(super) timeout_ms: u64,
    pub(super) next_p2p: u64,
    pub(super) last_started: Option<u64>,
    pub(super) last_completed: Option<u64>,
}

/// The recording state: the groups, and the last `capacity` entries in slots allocated once.
#[derive(Debug)]
pub(super) struct Ring {
    /// At most this many entries; then each new one replaces the oldest.
    pub(super) capacity: usize,
    pub(super) entries: Vec<Entry>,
    pub(super) next_id: u64,
    pub(super) groups: Vec<Group>,
    /// The clock when the recorder started ([`Clock`]).
    pub(super) epoch: Clock,
}

impl Ring {
    /// An empty ring of `capacity` entries; its clock starts now.
    pub(super) fn new(capacity: usize) -> Ring {
        Ring {
            capacity,
            entries: Vec::with_capacity(capacity),
            next_id: 0,
            groups: Vec::new(),
            epoch: Clock::now(),
        }
    }

    /// Registers a group of `world_size` ranks in which this process is `rank`; its ranks are
    /// `0..world_size` until [`set_ranks`](Self::set_ranks) maps them to the job's.
    pub(super) fn register(
        &mut self,
        rank: usize,
        world_size: usize,
        timeout: Duration,
    ) -> GroupId {
        let id = self.groups.len() as GroupId;
        self.groups.push(Group {
            name: id.to_string(),
            ranks: (0..world_size).collect(),
            rank,
            timeout_ms: timeout.as_millis() as u64,
            next_p2p: 0,
            last_started: None,
            last_completed: None,
        });
        id
    }

    /// Group `pg`'s ranks in the job's numbering.
    pub(super) fn set_ranks(&mut self, pg: GroupId, ranks: &[usize]) {
        if let Some(g) = self.groups.get_mut(pg as usize) {
            g.ranks = ranks.to_vec();
        }
    }

    /// Records `op`, which started at `started`, as completed at `done` ticks, or (`completed
    /// == false`: it failed) as started and never completed; the slot of the oldest entry once
    /// the ring is full.
    pub(super) fn record(&mut self, started: Started, op: Op, completed: bool, done: u64) {
        let Some(g) = self.groups.get_mut(op.pg as usize) else {
            return;
        };
        let p2p_seq = if op.is_p2p {
            g.next_p2p += 1;
            g.next_p2p - 1
        } else {
            g.last_started = Some(op.seq);
            if completed {
                g.last_completed = Some(op.seq);
            }
            0
        };
        let record_id = self.next_id;
        self.next_id += 1;
        let e = Entry {
            record_id,
            pg: op.pg,
            collective_seq: op.seq,
            p2p_seq,
            is_p2p: op.is_p2p,
            op: op.name,
            shape: op.shape,
            created: started.0,
            completed: done,
            state: if completed {
                State::Completed
            } else {
                State::Started
            },
        };
        if self.entries.len() < self.capacity {
            self.entries.push(e);
        } else {
            let slot = (record_id % self.capacity as u64) as usize;
            self.entries[slot] = e;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(pg: GroupId, seq: u64, is_p2p: bool) -> Op {
        Op {
            pg,
            seq,
            is_p2p,
            name: if is_p2p { "send" } else { "allreduce" },
            shape: Shape::p2p::<f32>(4, 1),
        }
    }

    #[test]
    fn a_full_ring_replaces_its_oldest_entries() {
        let mut ring = Ring::new(3);
        let pg = ring.register(0, 2, Duration::from_secs(5));
        for seq in 0..5 {
            ring.record(Started(seq), op(pg, seq, false), true, seq + 1);
        }
        let mut ids: Vec<u64> = ring.entries.iter().map(|e| e.record_id).collect();
        ids.sort_unstable();
        assert_eq!(ids, [2, 3, 4]);
        assert_eq!(ring.entries.len(), 3);
        let g = &ring.groups[pg as usize];
        assert_eq!((g.last_started, g.last_completed), (Some(4), Some(4)));
    }

    #[test]
    fn point_to_point_has_its_own_sequence_and_a_failure_stays_started() {
        let mut ring = Ring::new(8);
        let pg = ring.register(1, 2, Duration::from_secs(5));
        ring.set_ranks(pg, &[4, 6]);
        ring.record(Started(1), op(pg, 0, true), true, 2);
        ring.record(Started(3), op(pg, 0, true), true, 4);
        ring.record(Started(5), op(pg, 0, false), false, 0);
        let p2p: Vec<u64> = ring.entries.iter().map(|e| e.p2p_seq).collect();
        assert_eq!(p2p, [0, 1, 0]);
        let failed = ring.entries[2];
        assert_eq!((failed.state, failed.completed), (State::Started, 0));
        let g = &ring.groups[pg as usize];
        assert_eq!(g.ranks, [4, 6]);
        assert_eq!((g.last_started, g.last_completed), (Some(0), None));
        // An unknown group records nothing.
        ring.record(Started(7), op(9, 0, false), true, 8);
        assert_eq!(ring.entries.len(), 3);
    }
}
