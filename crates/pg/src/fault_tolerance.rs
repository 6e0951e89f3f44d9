//! [`FaultTolerance`]: a rank's way through the changes of its job's membership without leaving
//! the process (`phalanx launch --fault-tolerance`).
//!
//! Note [Generations]: under `--fault-tolerance` a round's process group lives in
//! *generations*, each a set of *slots* (the ranks the round started with, `RANK` of the first
//! workers). Generation 0 holds every slot (keys under the round's prefix). The store counter
//! [`keys::GENERATION`] names the newest generation, and [`keys::generation_change`] of `g`
//! says how `g` differs from `g - 1`: `-s` (slot `s` died) or `+s` (slot `s`'s replacement is
//! ready). Whoever makes a change bumps the counter first, then writes the change, so every
//! reader folds the same log into the same members:
//!
//! - A worker dies: its node's agent writes `-s` and starts a replacement. The other ranks' next
//!   collective fails (the dead process is watched), they wait for the counter to move, and
//!   connect generation `g` among themselves: members in slot order, rank = position, under the
//!   key prefix `ft/<g>` of the round (new addresses, connections, shared memory; nothing read
//!   from a dead generation). They go on training without it.
//! - The replacement first prepares (data, model: the slow part, while the others train), then
//!   writes `+s`. The running ranks see the counter move at a step boundary (each polls it at
//!   most every 50 ms and they agree on the newest value with one small allreduce per
//!   step), connect the new generation with it, and hand it their state.
//!
//! - A whole node is lost (agent and workers): the other agents see its heartbeat stop, and
//!   under `--nnodes MIN:MAX` one of them writes `-s` for each of its ranks; the others go on.
//!
//! A rank that waits in vain (no change within `PHALANX_TIMEOUT` after its group failed: no
//! restart left, or a static job that lost a node) fails with [`Error::Regroup`]; its exit
//! code tells the agent not to replace it in turn.
//!
//! ```no_run
//! # fn step(pg: &phalanx_pg::ProcessGroup) -> phalanx_pg::Result<()> { Ok(()) }
//! use phalanx_pg::FaultTolerance;
//! let mut ft = FaultTolerance::from_env()?.expect("started by phalanx launch --fault-tolerance");
//! let mut pg = ft.join()?;
//! loop {
//!     match step(&pg) {
//!         Ok(()) => {
//!             let newest = ft.newest()?; // then agree on it with the other ranks (MAX)
//!             if newest > ft.generation() {
//!                 pg = ft.advance(newest)?; // a replacement joins: hand it the state
//!             }
//!         }
//!         Err(e) if pg.failure().is_some() => pg = ft.regroup(e)?, // then resynchronise
//!         Err(e) => return Err(e),
//!     }
//! }
//! # Ok::<(), phalanx_pg::Error>(())
//! ```

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use phalanx_core::env;
use phalanx_store::{keys, PrefixStore, Store, TcpStore};

use crate::{init_with, Error, InitOptions, ProcessGroup, Result};

/// How often a waiting rank looks at the generation counter.
const POLL: Duration = Duration::from_millis(5);
/// How old a training rank's view of the counter may be ([`FaultTolerance::newest`]).
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(50);

/// A rank's place in the generations of its round (Note [Generations]).
pub struct FaultTolerance {
    /// The options of generation 0, from the environment: its rank is this process's slot.
    base: InitOptions,
    /// The round's keys (the launcher's store, under `PHALANX_STORE_PREFIX`).
    round: Arc<dyn Store>,
    /// The generation this rank is in, and its members (slots, ascending).
    generation: u64,
    members: Vec<usize>,
    /// Started to replace a dead worker (`PHALANX_FT_REPLACEMENT`).
    replacement: bool,
    /// The counter as last read, and when.
    seen: Cell<(u64, Option<Instant>)>,
}

impl std::fmt::Debug for FaultTolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultTolerance")
            .field("slot", &self.slot())
            .field("generation", &self.generation)
            .field("members", &self.members)
            .field("replacement", &self.replacement)
            .finish()
    }
}

impl FaultTolerance {
    /// `Some` when this worker was started by `phalanx launch --fault-tolerance`
    /// (`PHALANX_FAULT_TOLERANCE=1`): reads the launcher's variables and connects to its store.
    pub fn from_env() -> Result<Option<FaultTolerance>> {
        if env::get(env::PHALANX_FAULT_TOLERANCE).is_none_or(|v| v != "1") {
            return Ok(None);
        }
        let base = InitOptions::from_env()?;
        if !base.agent_store || base.torch_store {
            return Err(Error::Env {
                name: "PHALANX_FAULT_TOLERANCE".into(),
                value: "1".into(),
                reason: "fault tolerance needs phalanx launch's store (start the job with \
                         `phalanx launch --fault-tolerance …`)"
                    .into(),
            });
        }
        let rank = base.env.rank;
        let addr = format!("{}:{}", base.env.master_addr, base.env.master_port);
        let client = TcpStore::connect(&addr, &base.auth, base.timeout)
            .map_err(|source| Error::Store { rank, source })?;
        let round: Arc<dyn Store> = Arc::new(PrefixStore::new(
            base.store_prefix.trim_end_matches('/').to_string(),
            Arc::new(client),
        ));
        let members = (0..base.env.world_size).collect();
        Ok(Some(FaultTolerance {
            base,
            round,
            generation: 0,
            members,
            replacement: env::get(env::PHALANX_FT_REPLACEMENT).is_some_and(|v| v == "1"),
            seen: Cell::new((0, None)),
        }))
    }

    /// This process's slot: the rank it holds in the round's first generation, which decides
    /// its share of the data whatever its rank in a later one.
    pub fn slot(&self) -> usize {
        self.base.env.rank
    }

    /// The round's slots (its first world size).
    pub fn slots(&self) -> usize {
        self.base.env.world_size
    }

    /// The generation this rank is in.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The slots of the current generation, ascending (a rank's rank is its slot's position).
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// Whether this process replaces a worker that died: it holds no state and takes a peer's.
    pub fn is_replacement(&self) -> bool {
        self.replacement
    }

    /// Connects this process's first group: generation 0 for the round's first workers; for a
    /// replacement, the generation it adds itself to (call it once ready to train: the others
    /// connect it at their next step boundary).
    pub fn join(&mut self) -> Result<ProcessGroup> {
        if self.replacement {
            let g = self.change(&format!("+{}", self.slot()))?;
            return self.join_newest(g, None);
        }
        self.connect(0, (0..self.slots()).collect())
    }

    /// The newest generation, read from the store at most every 50 ms (a training
    /// rank calls it every step); the ranks must agree on one value (allreduce MAX) before
    /// they [`advance`](Self::advance).
    pub fn newest(&self) -> Result<u64> {
        let (g, at) = self.seen.get();
        if at.is_some_and(|at| at.elapsed() < POLL_EVERY) {
            return Ok(g);
        }
        let g = self.read_counter()?;
        self.seen.set((g, Some(Instant::now())));
        Ok(g)
    }

    /// A step boundary: every rank agreed that generation `to` is newer than this one (a
    /// replacement is ready, or a rank died). Connects it.
    pub fn advance(&mut self, to: u64) -> Result<ProcessGroup> {
        self.join_newest(to, None)
    }

    /// After `failure` broke this rank's group: waits (up to `PHALANX_TIMEOUT`) for the
    /// membership to change (an agent writes it as soon as it saw its worker die), then
    /// connects the newest generation. Without a change in time, [`Error::Regroup`] names the
    /// failure and the wait.
    pub fn regroup(&mut self, failure: Error) -> Result<ProcessGroup> {
        let start = Instant::now();
        loop {
            let newest = self.read_counter()?;
            if newest > self.generation {
                return self.join_newest(newest, Some(&failure));
            }
            if start.elapsed() >= self.base.timeout {
                return Err(Error::Regroup {
                    rank: self.slot(),
                    generation: self.generation,
                    waited_s: start.elapsed().as_secs_f64(),
                    cause: failure.to_string(),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Connects generation `at_least` or, if the membership moved on meanwhile, a newer one.
    fn join_newest(&mut self, at_least: u64, failure: Option<&Error>) -> Result<ProcessGroup> {
        let mut target = at_least.max(self.read_counter()?);
        loop {
            let members = self.members_of(target)?;
            if !members.contains(&self.slot()) {
                return Err(Error::Regroup {
                    rank: self.slot(),
                    generation: target,
                    waited_s: 0.0,
                    cause: format!(
                        "the launcher counted slot {} as dead in generation {target}{}",
                        self.slot(),
                        failure.map(|f| format!(" after: {f}")).unwrap_or_default()
                    ),
                });
            }
            match self.connect(target, members) {
                Ok(pg) => return Ok(pg),
                // Another rank died or arrived while this generation formed: join the newer.
                Err(e) => {
                    let newest = self.read_counter()?;
                    if newest > target {
                        tracing::warn!(
                            slot = self.slot(),
                            "generation {target} did not form ({e}); joining {newest}"
                        );
                        target = newest;
                        continue;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// The process group of generation `generation` with `members`.
    fn connect(&mut self, generation: u64, members: Vec<usize>) -> Result<ProcessGroup> {
        let mut opts = self.base.clone();
        if let Some(sub) = keys::generation_prefix(generation) {
            opts.store_prefix = format!("{}/{sub}", opts.store_prefix.trim_end_matches('/'));
        }
        opts.env.rank = members
            .iter()
            .position(|&s| s == self.slot())
            .expect("a member's own slot is in its generation");
        opts.env.world_size = members.len();
        tracing::info!(
            slot = self.slot(),
            rank = opts.env.rank,
            generation,
            members = ?members,
            "phalanx: joining process-group generation {generation}"
        );
        let pg = init_with(opts)?;
        // The launcher names a dead rank; the survivors must not wait for its word.
        pg.set_peer_word_wait(Duration::ZERO);
        self.generation = generation;
        self.members = members;
        self.seen.set((generation, Some(Instant::now())));
        Ok(pg)
    }

    /// Records a membership change: the next generation, and what changed in it.
    fn change(&self, what: &str) -> Result<u64> {
        let g = self.read_counter_add(1)?;
        self.round
            .set(&keys::generation_change(g), what.as_bytes())
            .map_err(|source| Error::Store {
                rank: self.slot(),
                source,
            })?;
        Ok(g)
    }

    /// The slots of generation `generation`: every slot, with the changes up to it applied.
    fn members_of(&self, generation: u64) -> Result<Vec<usize>> {
        let mut members: Vec<usize> = (0..self.slots()).collect();
        for g in 1..=generation {
            let key = keys::generation_change(g);
            // The counter moves before the change is written: wait for it.
            let raw = self.round.get(&key).map_err(|source| Error::Store {
                rank: self.slot(),
                source,
            })?;
            let text = String::from_utf8_lossy(&raw);
            let bad = || Error::Env {
                name: key.clone(),
                value: text.to_string(),
                reason: "expected -SLOT or +SLOT (a membership change, Note [Generations])".into(),
            };
            let slot: usize = text.get(1..).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            match text.as_bytes().first() {
                Some(b'-') => members.retain(|&m| m != slot),
                Some(b'+') if slot < self.slots() && !members.contains(&slot) => {
                    members.push(slot);
                    members.sort_unstable();
                }
                Some(b'+') => {}
                _ => return Err(bad()),
            }
        }
        Ok(members)
    }

    fn read_counter(&self) -> Result<u64> {
        self.read_counter_add(0)
    }

    fn read_counter_add(&self, delta: i64) -> Result<u64> {
        self.round
            .add(keys::GENERATION, delta)
            .map(|g| g.max(0) as u64)
            .map_err(|source| Error::Store {
                rank: self.slot(),
                source,
            })
    }
}
