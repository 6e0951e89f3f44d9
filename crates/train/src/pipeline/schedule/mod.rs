//! Pipeline schedules as data: each rank's list of compute actions (PyTorch pipelining's
//! `pipeline_order`), and the program it runs, with the messages between stages placed
//! ([`Schedule::program`], as [`Lowering`] says).
//!
//! Note [Schedules as data]
//! A schedule says, for each rank, in which order it runs the forward and the backward of
//! each (chunk, microbatch): GPipe all forwards then all backwards; 1F1B `p − 1 − rank`
//! forwards, then one forward and one backward in turn, then the backwards left; interleaved
//! 1F1B (Megatron's) the same over `v` chunks per rank, the rank's virtual stages `rank`,
//! `rank + p`, … A forward needs its input activation from the previous stage, a backward the
//! gradient of its output from the next; a forward sends its output on, a backward the
//! gradient of its input back. [`Schedule::program`] lowers the actions into each rank's
//! program of computes and exchanges, in one of two ways.
//!
//! Where a group's sends complete with no receive posted (the native backend's, Note [Sends
//! that read] in phalanx-transport), [`Lowering::AsNeeded`]: each message is sent right after
//! the compute that made it and received right before the compute that needs it. A rank then
//! waits only for what it needs, when it needs it, which is what the schedules' theory
//! assumes (a send larger than the socket buffers also waits for its receiver to end the
//! compute it is in). Each pair of ranks must then send its messages in the order the receiver
//! takes them, as the transport matches them in order; every schedule here does (a test checks
//! it).
//! Interleaved 1F1B runs ahead by design, and this is what it needs: at `p 2, v 2, m 8` its
//! busiest stage waited 0.17–0.19 of each step lowered in ticks and 0.07–0.09 so (docs/train.md),
//! while 1F1B and GPipe, which need nearly every message in the tick it arrives, measured the
//! same both ways.
//!
//! A stage that also runs tensor parallelism, or gathers a fully sharded block's parameters
//! mid-step, computes with collectives of another group: a send waiting for a peer busy in
//! one could wait behind a chain of such waits that comes back to its own rank. Its pipeline
//! group reads the peers' frames ahead in the background (Note [Background progress] in
//! phalanx-transport), so its sends complete while the peers compute, and it too lowers as
//! needed.
//!
//! Where a send may wait for its receive (MPI's and NCCL's large messages, or a program of
//! the user's own that calls `PipelineStage::pair_sends`),
//! [`Lowering::LockStep`] runs the schedule in lock-step ticks: in each tick
//! every message computed in the tick before moves, its send and its receive in one exchange on
//! each end (`batch_isend_irecv`, all of a tick's messages at once), then every rank computes
//! its next action if what it needs is there. Every exchange of a tick then meets its peers'
//! exchanges of the same tick, and those come after the ticks before: no rank can wait for a
//! message its peer sends only after waiting for this rank, whatever the schedule. (A program
//! that holds each send until its own next receive, as the first version did, deadlocks
//! interleaved 1F1B: two ranks each send the other a gradient that the other takes only after
//! its own send went.) A rank receives a message it needs later, as interleaved schedules have,
//! and keeps it, and waits for it there: 20 of 24 receives on rank 1 of interleaved 1F1B at
//! `p 2, v 2, m 8`, each tying that rank to its peer's progress at that tick. The tests run
//! every lock-step program of every schedule for many shapes through a model of the transport
//! in which a message moves only when both ends are waiting for it, and every as-needed one
//! through a model in which a send completes at once; neither deadlocks. (An as-needed
//! program does deadlock on the first model: two ranks each wait in a send the other has not
//! yet received.)
//!
//! Note [Rounds of microbatches]
//! Interleaved 1F1B sends the microbatches round the ranks in rounds: a rank runs a round's
//! microbatches through its first chunk, then through its second, and so on, so a round must
//! hold at least `p` microbatches for the last rank's output of the first to be back on rank 0
//! when rank 0 starts the round on its next chunk. Megatron takes rounds of exactly `p` and
//! so needs `m` to be a multiple of `p`; PyTorch's `ScheduleInterleaved1F1B` takes
//! `max(1, ⌊m / p⌋)` rounds of `g = m / rounds` microbatches and needs only that they divide
//! `m`, and so do we: any `m` below `2p` is one round (below `p` the ranks wait for each
//! other between chunks, and the lowering in ticks places those waits), and the warm-up is
//! `2 (p − 1 − rank) + (v − 1) g` forwards. That matters beyond the flag's range: a short last
//! batch of fewer rows than `--microbatches` takes the most microbatches that fit, and one of
//! fewer rows than `--pp` is a round of its own instead of a refusal.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

/// Which schedule (`--pp-schedule`): PyTorch's `ScheduleGPipe`, `Schedule1F1B`,
/// `ScheduleInterleaved1F1B`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipelineSchedule {
    /// Every microbatch's forward, then every backward: `m` microbatches' activations held.
    Gpipe,
    /// One forward, one backward: at most `p` microbatches' activations held.
    OneFOneB,
    /// 1F1B over `v` chunks per rank: the bubble shrinks `v` times.
    Interleaved,
}

impl FromStr for PipelineSchedule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "gpipe" => Ok(PipelineSchedule::Gpipe),
            "1f1b" => Ok(PipelineSchedule::OneFOneB),
            "interleaved" | "interleaved-1f1b" => Ok(PipelineSchedule::Interleaved),
            other => Err(format!(
                "unknown pipeline schedule {other:?}: expected gpipe, 1f1b or interleaved"
            )),
        }
    }
}

impl fmt::Display for PipelineSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PipelineSchedule::Gpipe => "gpipe",
            PipelineSchedule::OneFOneB => "1f1b",
            PipelineSchedule::Interleaved => "interleaved",
        })
    }
}

/// One compute action of a rank: the forward or backward of microbatch `mb` through the
/// rank's chunk `chunk` (its virtual stage `chunk · p + rank`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Forward.
    Forward {
        /// The rank's chunk.
        chunk: usize,
        /// The microbatch.
        mb: usize,
    },
    /// Backward.
    Backward {
        /// The rank's chunk.
        chunk: usize,
        /// The microbatch.
        mb: usize,
    },
}

/// A message between stages: the activation stage `from` sends to `from + 1`, or the
/// gradient it sends back to `from − 1`, of microbatch `mb`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Message {
    /// Whether it is a gradient (sent backwards) or an activation (forwards).
    pub grad: bool,
    /// The sending virtual stage.
    pub from: usize,
    /// The microbatch.
    pub mb: usize,
}

impl Message {
    /// The virtual stage it goes to.
    pub fn to(&self) -> usize {
        match self.grad {
            true => self.from - 1,
            false => self.from + 1,
        }
    }
}

/// One instruction of a rank's program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instr {
    /// Sends and receives that move together (`batch_isend_irecv`), in each pair's order.
    Exchange {
        /// What this rank sends.
        sends: Vec<Message>,
        /// What this rank receives.
        recvs: Vec<Message>,
    },
    /// A forward or backward.
    Compute(Action),
}

/// Where a program's exchanges go (Note [Schedules as data]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lowering {
    /// Each message moves in the exchange of the tick after it was computed, its send and its
    /// receive together: free of deadlocks where a send waits for its receive (MPI, NCCL).
    LockStep,
    /// Each message is sent right after the compute that made it and received right before
    /// the compute that needs it: for a group whose sends complete with no receive posted
    /// ([`phalanx_pg::ProcessGroup::sends_complete_alone`]).
    AsNeeded,
}

/// A pipeline schedule: `ranks` stages, `chunks` virtual stages per rank, `microbatches` per
/// step (Note [Schedules as data]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    kind: PipelineSchedule,
    ranks: usize,
    chunks: usize,
    microbatches: usize,
}

impl Schedule {
    /// A schedule of `kind` for `ranks` pipeline ranks with `chunks` virtual stages each and
    /// `microbatches` per step; refused, naming the numbers, where they do not fit.
    pub fn new(
        kind: PipelineSchedule,
        ranks: usize,
        chunks: usize,
        microbatches: usize,
    ) -> Result<Schedule, String> {
        if ranks == 0 || chunks == 0 || microbatches == 0 {
            return Err(format!(
                "a pipeline needs at least 1 stage, virtual stage and microbatch (got --pp \
                 {ranks}, --virtual-stages {chunks}, --microbatches {microbatches})"
            ));
        }
        match kind {
            PipelineSchedule::Interleaved if chunks < 2 => {
                return Err(format!(
                    "--pp-schedule interleaved runs several chunks on each rank: \
                     --virtual-stages {chunks} must be at least 2"
                ))
            }
            PipelineSchedule::Interleaved if !interleaved_fits(ranks, microbatches) => {
                let rounds = microbatches / ranks;
                return Err(format!(
                    "--pp-schedule interleaved sends the microbatches round the {ranks} ranks \
                     in rounds of equal size, at least {ranks} each: --microbatches \
                     {microbatches} does not split into {rounds} equal rounds (use fewer than \
                     {twice} microbatches, or a multiple of --pp {ranks})",
                    twice = 2 * ranks,
                ));
            }
            PipelineSchedule::Gpipe | PipelineSchedule::OneFOneB if chunks != 1 => {
                return Err(format!(
                    "--virtual-stages {chunks} needs --pp-schedule interleaved (--pp-schedule \
                     {kind} runs one stage per rank)"
                ))
            }
            _ => {}
        }
        Ok(Schedule {
            kind,
            ranks,
            chunks,
            microbatches,
        })
    }

    /// The schedule's kind.
    pub fn kind(&self) -> PipelineSchedule {
        self.kind
    }

    /// Pipeline ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// Virtual stages per rank.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// Microbatches per step.
    pub fn microbatches(&self) -> usize {
        self.microbatches
    }

    /// Virtual stages in all: `ranks × chunks`.
    pub fn stages(&self) -> usize {
        self.ranks * self.chunks
    }

    /// The virtual stage of `rank`'s chunk `chunk`.
    pub fn stage_of(&self, rank: usize, chunk: usize) -> usize {
        chunk * self.ranks + rank
    }

    /// The rank that runs virtual stage `stage`.
    pub fn rank_of(&self, stage: usize) -> usize {
        stage % self.ranks
    }

    /// Interleaved 1F1B's microbatches per round: `m / max(1, ⌊m / p⌋)` (Note [Rounds of
    /// microbatches]); `p` where `m` is a multiple of it.
    pub fn per_round(&self) -> usize {
        self.microbatches / (self.microbatches / self.ranks).max(1)
    }

    /// The schedule's bubble in theory, the share of a step a rank waits when every stage's
    /// forward and backward take the same time: `(p − 1) / (v·m + p − 1)`. With fewer
    /// microbatches than ranks, interleaved's one round also waits `p − m` at each of its
    /// `v − 1` changes of chunk (Note [Rounds of microbatches]), which both terms gain.
    pub fn bubble(&self) -> f64 {
        let (p, v, m) = (
            self.ranks as f64,
            self.chunks as f64,
            self.microbatches as f64,
        );
        let between = (v - 1.0) * (p - m).max(0.0);
        (p - 1.0 + between) / (v * m + p - 1.0 + between)
    }

    /// `rank`'s compute actions in order (Note [Schedules as data]).
    pub fn actions(&self, rank: usize) -> Vec<Action> {
        let (p, v, m) = (self.ranks, self.chunks, self.microbatches);
        let forward = |chunk, mb| Action::Forward { chunk, mb };
        let backward = |chunk, mb| Action::Backward { chunk, mb };
        match self.kind {
            PipelineSchedule::Gpipe => (0..m)
                .map(|mb| forward(0, mb))
                .chain((0..m).map(|mb| backward(0, mb)))
                .collect(),
            PipelineSchedule::OneFOneB => {
                let warmup = (p - 1 - rank).min(m);
                one_f_one_b(m, warmup, |k| forward(0, k), |k| backward(0, k))
            }
            PipelineSchedule::Interleaved => {
                // Megatron's order over rounds of g microbatches (Note [Rounds of
                // microbatches]): the k-th forward runs chunk (k / g) mod v on microbatch
                // (k / (g·v))·g + k mod g; the backwards take the chunks in reverse.
                let g = self.per_round();
                let mb = |k: usize| (k / (g * v)) * g + k % g;
                let chunk = |k: usize| (k / g) % v;
                let total = m * v;
                let warmup = ((p - rank - 1) * 2 + (v - 1) * g).min(total);
                one_f_one_b(
                    total,
                    warmup,
                    |k| forward(chunk(k), mb(k)),
                    |k| backward(v - 1 - chunk(k), mb(k)),
                )
            }
        }
    }

    /// The message `action` on `rank` needs before it runs, if any.
    pub fn needs(&self, rank: usize, action: Action) -> Option<Message> {
        let last = self.stages() - 1;
        match action {
            Action::Forward { chunk, mb } => {
                let stage = self.stage_of(rank, chunk);
                (stage > 0).then(|| Message {
                    grad: false,
                    from: stage - 1,
                    mb,
                })
            }
            Action::Backward { chunk, mb } => {
                let stage = self.stage_of(rank, chunk);
                (stage < last).then(|| Message {
                    grad: true,
                    from: stage + 1,
                    mb,
                })
            }
        }
    }

    /// The message `action` on `rank` sends when it is done, if any.
    pub fn sends(&self, rank: usize, action: Action) -> Option<Message> {
        let last = self.stages() - 1;
        match action {
            Action::Forward { chunk, mb } => {
                let stage = self.stage_of(rank, chunk);
                (stage < last).then_some(Message {
                    grad: false,
                    from: stage,
                    mb,
                })
            }
            Action::Backward { chunk, mb } => {
                let stage = self.stage_of(rank, chunk);
                (stage > 0).then_some(Message {
                    grad: true,
                    from: stage,
                    mb,
                })
            }
        }
    }

    /// The tag of `message`: unique within a step, so that a receive that does not match its
    /// send fails naming both.
    pub fn tag(&self, message: &Message) -> u32 {
        let id = (message.from * self.microbatches + message.mb) * 2 + message.grad as usize;
        id as u32
    }

    /// `rank`'s program: its actions with the exchanges between them, placed as `lowering`
    /// says (Note [Schedules as data]).
    pub fn program(&self, rank: usize, lowering: Lowering) -> Vec<Instr> {
        match lowering {
            Lowering::LockStep => self.lock_step().swap_remove(rank),
            Lowering::AsNeeded => self.as_needed(rank),
        }
    }

    /// Every rank's program, lowered as `lowering` says.
    pub fn programs(&self, lowering: Lowering) -> Vec<Vec<Instr>> {
        match lowering {
            Lowering::LockStep => self.lock_step(),
            Lowering::AsNeeded => (0..self.ranks).map(|r| self.as_needed(r)).collect(),
        }
    }

    /// `rank`'s program with each message sent in an exchange of its own right after the
    /// compute that made it, and received in one of its own right before the compute that
    /// needs it (Note [Schedules as data]).
    fn as_needed(&self, rank: usize) -> Vec<Instr> {
        let mut program = Vec::new();
        for action in self.actions(rank) {
            // A message between two chunks of this rank (`--pp 1` with chunks) stays here.
            if let Some(msg) = self.needs(rank, action) {
                if self.rank_of(msg.from) != rank {
                    program.push(Instr::Exchange {
                        sends: Vec::new(),
                        recvs: vec![msg],
                    });
                }
            }
            program.push(Instr::Compute(action));
            if let Some(msg) = self.sends(rank, action) {
                if self.rank_of(msg.to()) != rank {
                    program.push(Instr::Exchange {
                        sends: vec![msg],
                        recvs: Vec::new(),
                    });
                }
            }
        }
        program
    }

    /// Every rank's program, from a run of the schedule in lock-step ticks (Note [Schedules
    /// as data]).
    fn lock_step(&self) -> Vec<Vec<Instr>> {
        let p = self.ranks;
        let actions: Vec<Vec<Action>> = (0..p).map(|r| self.actions(r)).collect();
        let mut next = vec![0usize; p];
        let mut have: Vec<HashSet<Message>> = vec![HashSet::new(); p];
        let mut programs: Vec<Vec<Instr>> = vec![Vec::new(); p];
        // Messages computed in the last tick, in the order they were: a rank computes one
        // action a tick, so a pair carries at most one message a tick and its order holds.
        let mut in_flight: Vec<(usize, Message)> = Vec::new();
        while (0..p).any(|r| next[r] < actions[r].len()) || !in_flight.is_empty() {
            // The tick's exchange: every message of the last tick, on both ends at once.
            let mut sends: Vec<Vec<Message>> = vec![Vec::new(); p];
            let mut recvs: Vec<Vec<Message>> = vec![Vec::new(); p];
            for (from, msg) in in_flight.drain(..) {
                let to = self.rank_of(msg.to());
                sends[from].push(msg);
                recvs[to].push(msg);
                have[to].insert(msg);
            }
            for (r, (sends, recvs)) in sends.into_iter().zip(recvs).enumerate() {
                if !sends.is_empty() || !recvs.is_empty() {
                    programs[r].push(Instr::Exchange { sends, recvs });
                }
            }
            // The tick's computes: each rank's next action, where what it needs is here.
            let mut progressed = false;
            for r in 0..p {
                let Some(&action) = actions[r].get(next[r]) else {
                    continue;
                };
                if self
                    .needs(r, action)
                    .is_some_and(|msg| !have[r].remove(&msg))
                {
                    continue;
                }
                programs[r].push(Instr::Compute(action));
                next[r] += 1;
                progressed = true;
                if let Some(msg) = self.sends(r, action) {
                    match self.rank_of(msg.to()) == r {
                        // Between two chunks of this rank (`--pp 1` with chunks).
                        true => {
                            have[r].insert(msg);
                        }
                        false => in_flight.push((r, msg)),
                    }
                }
            }
            assert!(
                progressed || !in_flight.is_empty(),
                "{self:?}: an action waits for a message no action sends"
            );
        }
        programs
    }
}

/// Whether interleaved 1F1B takes `microbatches` on `ranks` ranks: they split into
/// `max(1, ⌊m / p⌋)` rounds of equal size (Note [Rounds of microbatches]).
pub(super) fn interleaved_fits(ranks: usize, microbatches: usize) -> bool {
    microbatches.is_multiple_of((microbatches / ranks).max(1))
}

/// `total` forwards and backwards in 1F1B order: `warmup` forwards, then a forward and a
/// backward in turn, then the backwards left.
fn one_f_one_b(
    total: usize,
    warmup: usize,
    forward: impl Fn(usize) -> Action,
    backward: impl Fn(usize) -> Action,
) -> Vec<Action> {
    let mut order: Vec<Action> = (0..warmup).map(&forward).collect();
    for k in 0..total - warmup {
        order.push(forward(warmup + k));
        order.push(backward(k));
    }
    order.extend((total - warmup..total).map(backward));
    order
}

#[cfg(test)]
mod tests;
