//! [`FaultTolerance`]: a rank's way through the changes of its job's membership without leaving
//! the process (`phalanx launch --fault-tolerance`).
//!
//! Note [FT generations]: under `--fault-tolerance` a round's process group lives in
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
//!   A node lost while a generation forms (before generation 0 formed, its workers never
//!   published their addresses) costs the others a moment: the waits of the bootstrap watch
//!   the log ([`FaultTolerance::watch`], Note [Watched waits] in phalanx-store) and stop once
//!   it removes a member, and they connect the generation without it. The TCP mesh's
//!   connects and accepts ask the same watch (Note [A watched mesh] in phalanx-transport), so
//!   a rank lost after it published its address costs the same moment. Whole blocks
//!   (islands) are not watched.
//! - A node arrives under `--nnodes MIN:MAX` (Note [Node admission] in phalanx-launch): its ranks
//!   get new slots, from the round's first world size up ([`FaultTolerance::slots`],
//!   `PHALANX_FT_SLOTS`), and join as replacements do, with `+s`.
//!
//! A joining rank connects only once a running rank has opened its generation or a newer one
//! ([`keys::generation_open`]), and then exactly the newest opened: the running ranks connect
//! exactly the generation they agreed on, so two joiners a moment apart join at two step
//! boundaries, never in two different generations at once. When the run ends first, rank 0
//! writes `end` to the log and the joiner has nothing to do ([`FaultTolerance::join`] gives
//! `None`). The slots of generation 0 are `0..slots()`; a `+s` adds any slot not in, a `-s`
//! removes one.
//!
//! Note [Whole blocks]: the islands of `phalanx train --outer` each run one engine over their
//! ranks, so an island with a rank missing cannot train. Under
//! [`FaultTolerance::set_block`]`(n)` slots live and die in blocks of `n` (`slot / n`): the
//! running ranks advance only to generations made of whole blocks, and after a failure they
//! connect the newest such generation ([`FaultTolerance::regroup_whole`]). A rank whose block
//! lost a member is left alone: it writes `-s` for itself, which makes the generation without
//! its block whole for the others, then `+s` as a replacement, and joins again once its block
//! is whole, taking its state from a peer block as any replacement does. The survivors of one
//! generation connect one target, the first decider's (a compare-and-set in the store): two
//! that read the log a moment apart could otherwise pick two generations of the same members
//! and wait for each other. A failure that leaves no block whole ends the run at once with a
//! sentence. A replacement waits for the running ranks' next outer sync, up to
//! `PHALANX_TIMEOUT`: that timeout must exceed the time of `--sync-every` steps.
//!
//! A rank that waits in vain (no change within `PHALANX_TIMEOUT` after its group failed: no
//! restart left, or a static job that lost a node) fails with [`Error::Regroup`]; its exit
//! code tells the agent not to replace it in turn.
//!
//! ```no_run
//! # fn step(pg: &phalanx_pg::ProcessGroup) -> phalanx_pg::Result<()> { Ok(()) }
//! use phalanx_pg::FaultTolerance;
//! let mut ft = FaultTolerance::from_env()?.expect("started by phalanx launch --fault-tolerance");
//! let Some(mut pg) = ft.join()? else { return Ok(()) }; // the run ended before it joined
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
//!     # break;
//! }
//! ft.finish(&pg)?; // a rank still joining has nothing to do
//! # Ok::<(), phalanx_pg::Error>(())
//! ```

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use phalanx_core::env;
use phalanx_store::{keys, PrefixStore, Store, Watch};

use crate::init::init_watched;
use crate::{Error, InitOptions, ProcessGroup, Result};

/// How long the generation log stands still before a rank of a block regroups on it
/// ([`FaultTolerance::regroup_whole`]).
const SETTLE: Duration = Duration::from_millis(250);
/// How often a waiting rank looks at the generation counter.
const POLL: Duration = Duration::from_millis(5);
/// How often a wait of a generation's bootstrap looks at the log ([`FaultTolerance::watch`]):
/// one more store request per waiting rank each time, once the wait has lasted that long.
const WATCH_SLICE: Duration = Duration::from_millis(500);
/// How old a training rank's view of the counter may be ([`FaultTolerance::newest`]).
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(50);

/// A rank's place in the generations of its round (Note [FT generations]).
pub struct FaultTolerance {
    /// The options of generation 0, from the environment: its rank is this process's slot.
    base: InitOptions,
    /// The round's keys (the launcher's store, under `PHALANX_STORE_PREFIX`).
    round: Arc<dyn Store>,
    /// The generation this rank is in, and its members (slots, ascending).
    generation: u64,
    members: Vec<usize>,
    /// The slots of generation 0 (`PHALANX_FT_SLOTS`, else the world size).
    first: usize,
    /// Started to replace a dead worker, or on a node admitted into the running round
    /// (`PHALANX_FT_REPLACEMENT`).
    replacement: bool,
    /// The counter as last read, and when.
    seen: Cell<(u64, Option<Instant>)>,
    /// Slots in blocks of this many that live and die together ([`set_block`](Self::set_block):
    /// islands); 1: any set of slots is a generation to train in.
    block: usize,
    /// Set when [`regroup_whole`](Self::regroup_whole) left this rank alone and it joined
    /// again ([`take_rejoined`](Self::take_rejoined)).
    rejoined: bool,
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
        let client =
            crate::init::job_store(&base).map_err(|source| Error::Store { rank, source })?;
        let round: Arc<dyn Store> = Arc::new(PrefixStore::new(
            base.store_prefix.trim_end_matches('/').to_string(),
            client,
        ));
        let first = match env::get(env::PHALANX_FT_SLOTS) {
            None => base.env.world_size,
            Some(v) => v
                .trim()
                .parse()
                .ok()
                .filter(|&n| n >= 1 && n <= base.env.world_size)
                .ok_or_else(|| Error::Env {
                    name: "PHALANX_FT_SLOTS".into(),
                    value: v.clone(),
                    reason: format!(
                        "expected the round's first world size, 1..={} (WORLD_SIZE)",
                        base.env.world_size
                    ),
                })?,
        };
        Ok(Some(FaultTolerance {
            base,
            round,
            generation: 0,
            members: (0..first).collect(),
            first,
            replacement: env::get(env::PHALANX_FT_REPLACEMENT).is_some_and(|v| v == "1"),
            seen: Cell::new((0, None)),
            block: 1,
            rejoined: false,
        }))
    }

    /// This process's slot: the rank it holds in the round's first generation, which decides
    /// its share of the data whatever its rank in a later one.
    pub fn slot(&self) -> usize {
        self.base.env.rank
    }

    /// The round's first world size: its first generation's slots (`0..slots()`). Slots of
    /// nodes admitted later are numbered from it up.
    pub fn slots(&self) -> usize {
        self.first
    }

    /// The ranks on this rank's node (`LOCAL_WORLD_SIZE`), known before it joins.
    pub fn local_world_size(&self) -> usize {
        self.base.env.local_world_size
    }

    /// The generation this rank is in.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The slots of the current generation, ascending (a rank's rank is its slot's position).
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// Trains only in generations made of whole blocks of `n` consecutive slots (`slot / n`
    /// names a block): the islands of `phalanx train --outer`, whose ranks share one engine,
    /// and the model replicas of `--tp`/`--pp`, each of whose ranks holds a piece, so that a
    /// block with a rank missing cannot train (Note [Whole blocks]).
    pub fn set_block(&mut self, n: usize) {
        self.block = n.max(1);
    }

    /// The slots of `members` whose blocks are whole there: the ranks that can train in
    /// that generation (Note [Whole blocks]).
    fn whole_blocks(&self, members: &[usize]) -> Vec<usize> {
        let n = self.block;
        members
            .iter()
            .copied()
            .filter(|&m| (m / n * n..(m / n + 1) * n).all(|s| members.contains(&s)))
            .collect()
    }

    /// The newest generation after `above`, up to `counter`, in whose whole blocks this
    /// rank is (or the one at which the run ended); with `changed`, only one with other
    /// members than `self.members` (at a boundary: a generation that is the same group is no
    /// change). `None` if there is none.
    fn newest_whole(&self, counter: u64, above: u64, changed: bool) -> Result<Option<u64>> {
        for g in (above + 1..=counter).rev() {
            match self.fold(g)? {
                Fold::Ended(_) => return Ok(Some(g)),
                Fold::Members(m) => {
                    let m = self.whole_blocks(&m);
                    if m.contains(&self.slot()) && (!changed || m != self.members) {
                        return Ok(Some(g));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Whether this process replaces a worker that died: it holds no state and takes a peer's.
    pub fn is_replacement(&self) -> bool {
        self.replacement
    }

    /// Connects this process's first group: generation 0 for the round's first workers; for a
    /// replacement, the generation it adds itself to (call it once ready to train: the others
    /// connect it at their next step boundary). `None`: the run ended before it could join, so
    /// there is nothing left for it to do.
    pub fn join(&mut self) -> Result<Option<ProcessGroup>> {
        if !self.replacement {
            // Through `join_from`: a node lost before generation 0 formed (its workers never
            // published their addresses) is a `-s` in the log; the others' wait stops on it
            // (`watch`), and they go on in the generation without it instead of failing.
            return self.join_from(0, None).map(Some);
        }
        let mine = self.change(&format!("+{}", self.slot()))?;
        // Connect only a generation that the running ranks form: they open it at a step
        // boundary, or they finished and will not (Note [FT generations]).
        let start = Instant::now();
        loop {
            let newest = self.read_counter()?;
            if let Fold::Ended(at) = self.fold(newest)? {
                tracing::info!(
                    slot = self.slot(),
                    "phalanx: the run ended (generation {at}) before this rank could join"
                );
                return Ok(None);
            }
            // Exactly the newest generation they opened: they wait in it for this rank, even
            // if a later one (another joiner's) exists already.
            for g in (mine..=newest).rev() {
                let open = self
                    .round
                    .check(&[&keys::generation_open(g)])
                    .map_err(|source| Error::Store {
                        rank: self.slot(),
                        source,
                    })?;
                let mine_there = match (self.block, self.fold(g)?) {
                    (1, _) | (_, Fold::Ended(_)) => true,
                    (_, Fold::Members(m)) => self.whole_blocks(&m).contains(&self.slot()),
                };
                // Under blocks, a generation the others opened without this rank's block
                // (one of it still joining) is not this rank's: it waits for the next.
                if open && mine_there {
                    return self.join_from(g, None).map(Some);
                }
            }
            if start.elapsed() >= self.base.timeout {
                return Err(Error::Regroup {
                    rank: self.slot(),
                    generation: mine,
                    waited_s: start.elapsed().as_secs_f64(),
                    cause: "no running rank connected the generation this rank joined".into(),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// The run is complete: the lowest member writes `end` to the log, so that a rank still
    /// joining (a replacement, an admitted node's) exits instead of waiting for a group that
    /// will not form. Call it on every rank after the last collective.
    pub fn finish(&self, pg: &ProcessGroup) -> Result<()> {
        if pg.rank() == 0 {
            self.change("end")?;
        }
        Ok(())
    }

    /// Tells the launcher that this program re-forms its group itself
    /// ([`keys::FT_TAKES_PART`]): a program it cannot vouch for (a Python interpreter) has its
    /// dead workers replaced alone only after one of its ranks said so.
    pub fn take_part(&self) -> Result<()> {
        self.round
            .set(keys::FT_TAKES_PART, b"1")
            .map_err(|source| Error::Store {
                rank: self.slot(),
                source,
            })
    }

    /// The newest generation, read from the store at most every 50 ms (a training
    /// rank calls it every step), without waiting or writing, so possibly a moment behind
    /// (Note [A poll reads serializably] in phalanx-store); the ranks must agree on one value
    /// (allreduce MAX) before they [`advance`](Self::advance).
    pub fn newest(&self) -> Result<u64> {
        let (g, at) = self.seen.get();
        if at.is_some_and(|at| at.elapsed() < POLL_EVERY) {
            return Ok(g);
        }
        let mut g = keys::peek_generation(&*self.round).map_err(|source| Error::Store {
            rank: self.slot(),
            source,
        })?;
        if self.block > 1 {
            g = self
                .newest_whole(g, self.generation, true)?
                .unwrap_or(self.generation);
        }
        self.seen.set((g, Some(Instant::now())));
        Ok(g)
    }

    /// A step boundary: every rank agreed that generation `to` is newer than this one (a
    /// replacement is ready, or a rank died). Connects exactly `to`, the generation they agreed
    /// on and a joiner waits for; a newer one is for the next boundary.
    pub fn advance(&mut self, to: u64) -> Result<ProcessGroup> {
        self.join_from(to, None)
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

    /// [`regroup`](Self::regroup) in whole blocks (Note [Whole blocks]): waits for a newer
    /// generation in whose whole blocks this rank is and connects them; a rank whose block
    /// lost a member is left alone in it and joins again, as a replacement
    /// ([`is_replacement`] turns true), to take its state from a peer block. `None`: it was
    /// left alone and the run ended before it could join.
    ///
    /// [`is_replacement`]: Self::is_replacement
    pub fn regroup_whole(&mut self, failure: Error) -> Result<Option<ProcessGroup>> {
        let n = self.block;
        let start = Instant::now();
        let mut seen = (self.generation, Instant::now());
        loop {
            let newest = self.read_counter()?;
            if newest != seen.0 {
                seen = (newest, Instant::now());
            }
            // A block's ranks die together and their agents write one change each, a moment
            // apart: the log is read once it stood still a while, so as not to connect a
            // generation that still counts one of them.
            if newest > self.generation && seen.1.elapsed() >= SETTLE {
                if let Fold::Members(members) = self.fold(newest)? {
                    let mine = self.slot() / n * n;
                    let left_alone = members.contains(&self.slot())
                        && !(mine..mine + n).all(|s| members.contains(&s));
                    if left_alone && self.whole_blocks(&members).is_empty() {
                        return Err(Error::Regroup {
                            rank: self.slot(),
                            generation: newest,
                            waited_s: start.elapsed().as_secs_f64(),
                            cause: format!(
                                "{failure}; every block of {n} slots lost a member (members \
                                 {members:?}): no island or model replica is whole to go on \
                                 with, so the run cannot recover in place"
                            ),
                        });
                    }
                    if left_alone {
                        return self.rejoin(&format!(
                            "slots {mine}..{} train together and one is gone",
                            mine + n
                        ));
                    }
                }
                if let Some(g) = self.newest_whole(newest, self.generation, false)? {
                    // Every survivor of this generation connects one target, the first
                    // decider's: two that read the log a moment apart would otherwise wait
                    // for each other in two generations.
                    let key = format!("ft/{}/regroup-whole", self.generation);
                    let agreed = self
                        .round
                        .compare_set(&key, b"", g.to_string().as_bytes())
                        .map_err(|source| Error::Store {
                            rank: self.slot(),
                            source,
                        })?;
                    let g: u64 = String::from_utf8_lossy(&agreed).parse().unwrap_or(g);
                    if let Fold::Members(m) = self.fold(g)? {
                        if !self.whole_blocks(&m).contains(&self.slot()) {
                            return self.rejoin("the others went on without this rank's block");
                        }
                    }
                    return self.join_from(g, Some(&failure)).map(Some);
                }
            }
            if start.elapsed() >= self.base.timeout {
                return Err(Error::Regroup {
                    rank: self.slot(),
                    generation: self.generation,
                    waited_s: start.elapsed().as_secs_f64(),
                    cause: format!(
                        "{failure} (no generation made of whole blocks of {n} slots formed)"
                    ),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Leaves the group (`-s`) and joins again as a replacement (`+s`), to take its state from
    /// a peer block once its own is whole again.
    fn rejoin(&mut self, why: &str) -> Result<Option<ProcessGroup>> {
        tracing::warn!(
            slot = self.slot(),
            "fault tolerance: {why}; this rank joins again to take its state from a peer"
        );
        self.change(&format!("-{}", self.slot()))?;
        self.replacement = true;
        self.rejoined = true;
        self.join()
    }

    /// Whether [`regroup_whole`](Self::regroup_whole) made this rank join again since the last
    /// call: it gave up its state and takes a peer's, as a replacement.
    pub fn take_rejoined(&mut self) -> bool {
        std::mem::take(&mut self.rejoined)
    }

    /// Connects generation `at_least` or, if the membership moved on meanwhile, a newer one.
    fn join_newest(&mut self, at_least: u64, failure: Option<&Error>) -> Result<ProcessGroup> {
        let newest = at_least.max(self.read_counter()?);
        self.join_from(newest, failure)
    }

    /// Connects generation `target`; if it does not form and the membership moved on, a newer
    /// one.
    fn join_from(&mut self, mut target: u64, failure: Option<&Error>) -> Result<ProcessGroup> {
        loop {
            let members = match self.fold(target)? {
                Fold::Members(m) if self.block > 1 => self.whole_blocks(&m),
                Fold::Members(m) => m,
                Fold::Ended(at) => {
                    return Err(Error::Regroup {
                        rank: self.slot(),
                        generation: at,
                        waited_s: 0.0,
                        cause: format!(
                            "the other ranks finished the run{}",
                            failure.map(|f| format!(" after: {f}")).unwrap_or_default()
                        ),
                    })
                }
            };
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
                    let mut newest = self.read_counter()?;
                    if self.block > 1 {
                        newest = self.newest_whole(newest, target, false)?.unwrap_or(target);
                    }
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
        // A joining rank waits for this before it connects.
        self.round
            .set(&keys::generation_open(generation), b"1")
            .map_err(|source| Error::Store {
                rank: self.slot(),
                source,
            })?;
        let pg = init_watched(opts, self.watch(generation, &members))?;
        // The launcher names a dead rank; the survivors must not wait for its word.
        pg.set_fault_tolerant();
        self.generation = generation;
        self.members = members;
        self.seen.set((generation, Some(Instant::now())));
        Ok(pg)
    }

    /// Records a membership change: the next generation, and what changed in it.
    fn change(&self, what: &str) -> Result<u64> {
        keys::append_generation_change(&*self.round, &|k| k.to_string(), what).map_err(|source| {
            Error::Store {
                rank: self.slot(),
                source,
            }
        })
    }

    /// The slots of generation `generation`: generation 0's, with the changes up to it
    /// applied; or the generation at which the run ended.
    fn fold(&self, generation: u64) -> Result<Fold> {
        let mut members: Vec<usize> = (0..self.slots()).collect();
        for g in 1..=generation {
            let key = keys::generation_change(g);
            // The counter moves before the change is written: wait for it.
            let raw = self.round.get(&key).map_err(|source| Error::Store {
                rank: self.slot(),
                source,
            })?;
            let text = String::from_utf8_lossy(&raw);
            match Change::parse(&text) {
                Some(Change::End) => return Ok(Fold::Ended(g)),
                Some(Change::Leave(slot)) => members.retain(|&m| m != slot),
                Some(Change::Join(slot)) if !members.contains(&slot) => {
                    members.push(slot);
                    members.sort_unstable();
                }
                Some(Change::Join(_)) => {}
                None => return Err(Error::Env {
                    name: key,
                    value: text.to_string(),
                    reason:
                        "expected -SLOT, +SLOT or end (a membership change, Note [FT generations])"
                            .into(),
                }),
            }
        }
        Ok(Fold::Members(members))
    }

    /// What watches the waits of generation `generation`'s bootstrap (Note [Watched waits] in
    /// phalanx-store) and its mesh's connections (Note [A watched mesh] in
    /// phalanx-transport): a rank lost before it published its address would hold the others
    /// there for `PHALANX_TIMEOUT`, while the launcher has already logged it gone. The wait
    /// stops once a later change removes one of `members` or ends the run, or once a rank has
    /// opened a later generation (it gave up on this one, which then cannot form: two ranks
    /// that read the counter on either side of a `+s` meet in the later one); `join_from`
    /// then connects the newest. A newer generation that only adds slots does not stop it by
    /// itself: this one can still form, and some ranks may have finished its bootstrap.
    /// In whole blocks (Note [Whole blocks]) the waits are not watched: which later
    /// generation is theirs depends on the blocks, and they wait as before.
    fn watch(&self, generation: u64, members: &[usize]) -> Option<(Duration, Watch)> {
        if self.block > 1 {
            return None;
        }
        let round = self.round.clone();
        let members = members.to_vec();
        let watch: Watch = Box::new(move || {
            let newest = keys::read_generation(&*round).ok()?;
            (generation + 1..=newest).find_map(|g| {
                if round.check(&[&keys::generation_open(g)]).ok()? {
                    return Some(format!(
                        "generation {g} is open while generation {generation} formed"
                    ));
                }
                // The counter moves before the change is written: one not yet there is read at
                // the next slice (a `get` would wait for it).
                let key = keys::generation_change(g);
                if !round.check(&[&key]).ok()? {
                    return None;
                }
                let raw = round.get(&key).ok()?;
                match Change::parse(&String::from_utf8_lossy(&raw))? {
                    Change::Leave(slot) if members.contains(&slot) => Some(format!(
                        "slot {slot} left in generation {g} while generation {generation} formed"
                    )),
                    Change::End => Some(format!("the run ended in generation {g}")),
                    _ => None,
                }
            })
        });
        Some((WATCH_SLICE, watch))
    }

    fn read_counter(&self) -> Result<u64> {
        keys::read_generation(&*self.round).map_err(|source| Error::Store {
            rank: self.slot(),
            source,
        })
    }
}

/// One entry of the generation log (Note [FT generations]).
enum Change {
    /// `-SLOT`: the launcher counted the slot dead or gone.
    Leave(usize),
    /// `+SLOT`: a replacement or an admitted node's rank added itself.
    Join(usize),
    /// `end`: the run is complete.
    End,
}

impl Change {
    /// The change `text` says, or `None` when it is none of the three.
    fn parse(text: &str) -> Option<Change> {
        if text == "end" {
            return Some(Change::End);
        }
        let slot = text.get(1..)?.parse().ok()?;
        match text.as_bytes().first()? {
            b'-' => Some(Change::Leave(slot)),
            b'+' => Some(Change::Join(slot)),
            _ => None,
        }
    }
}

/// What the generation log folds into.
enum Fold {
    /// The slots of the generation, ascending.
    Members(Vec<usize>),
    /// The run ended at this generation.
    Ended(u64),
}

#[cfg(test)]
mod tests {
    use phalanx_store::{Auth, HashStore};

    use super::*;
    use crate::DistEnv;

    /// Slot `slot` of a round that started with `first` ranks, on `store` (no launcher).
    fn member(store: &Arc<HashStore>, slot: usize, first: usize, joiner: bool) -> FaultTolerance {
        let base = InitOptions {
            env: DistEnv {
                rank: slot,
                world_size: slot.max(first - 1) + 1,
                local_rank: 0,
                local_world_size: 1,
                group_rank: 0,
                master_addr: "127.0.0.1".into(),
                master_port: 1,
                source: "test",
            },
            auth: Auth::new("job", b"secret".to_vec()),
            timeout: Duration::from_secs(5),
            socket_ifname: None,
            store_prefix: String::new(),
            agent_store: true,
            torch_store: false,
            etcd: None,
            collectives: Default::default(),
        };
        FaultTolerance {
            base,
            round: store.clone(),
            generation: 0,
            members: (0..first).collect(),
            first,
            replacement: joiner,
            seen: Cell::new((0, None)),
            block: 1,
            rejoined: false,
        }
    }

    fn log(store: &HashStore, changes: &[&str]) {
        for c in changes {
            keys::append_generation_change(store, &|k| k.to_string(), c).unwrap();
        }
    }

    #[test]
    fn the_log_folds_into_the_same_members_with_admitted_slots_after_the_first() {
        let store = Arc::new(HashStore::default());
        // Slot 1 died, node with slot 3 admitted, slot 1's replacement back, the run ended.
        log(&store, &["-1", "+3", "+1", "end"]);
        let ft = member(&store, 0, 3, false);
        assert!(matches!(ft.fold(1).unwrap(), Fold::Members(m) if m == [0, 2]));
        assert!(matches!(ft.fold(2).unwrap(), Fold::Members(m) if m == [0, 2, 3]));
        assert!(matches!(ft.fold(3).unwrap(), Fold::Members(m) if m == [0, 1, 2, 3]));
        assert!(matches!(ft.fold(4).unwrap(), Fold::Ended(4)));
        let garbled = Arc::new(HashStore::default());
        log(&garbled, &["-1", "?7"]);
        let e = member(&garbled, 0, 3, false)
            .fold(2)
            .err()
            .expect("unreadable");
        let e = e.to_string();
        assert!(e.contains("ft/2/change") && e.contains("?7"), "{e}");
    }

    #[test]
    fn in_blocks_only_whole_blocks_of_a_generation_are_connected() {
        let store = Arc::new(HashStore::default());
        // Islands {0, 1} and {2, 3}: slot 3 dies, slot 2 is left alone and leaves, both come
        // back one after the other.
        log(&store, &["-3", "-2", "+2", "+3"]);
        let mut ft = member(&store, 0, 4, false);
        ft.set_block(2);
        assert_eq!(ft.whole_blocks(&[0, 1, 2]), [0, 1]);
        assert_eq!(ft.whole_blocks(&[1, 2, 3]), [2, 3]);
        assert_eq!(ft.whole_blocks(&[0, 1, 2, 3]), [0, 1, 2, 3]);
        // From generation 0: {0, 1, 2} trains as {0, 1}; {0, 1, 2, 3} again is no change.
        assert_eq!(ft.newest_whole(1, 0, true).unwrap(), Some(1));
        assert_eq!(ft.newest_whole(4, 0, true).unwrap(), Some(3));
        // After a failure, the same members again are a group to form.
        assert_eq!(ft.newest_whole(4, 0, false).unwrap(), Some(4));
        // From {0, 1}: only slot 2 back is no change, both back is.
        ft.members = vec![0, 1];
        ft.generation = 2;
        assert_eq!(ft.newest_whole(3, 2, true).unwrap(), None);
        assert_eq!(ft.newest_whole(4, 2, true).unwrap(), Some(4));
        assert_eq!(ft.newest().unwrap(), 4);
        // Slot 3, back first, waits for a generation its block is whole in.
        let joiner = {
            let mut j = member(&store, 3, 4, true);
            j.set_block(2);
            j
        };
        assert!(
            matches!(joiner.fold(3).unwrap(), Fold::Members(m) if !joiner.whole_blocks(&m).contains(&3))
        );
    }

    #[test]
    fn a_forming_generation_stops_waiting_when_a_member_leaves_or_the_run_ends() {
        let store = Arc::new(HashStore::default());
        let ft = member(&store, 0, 3, false);
        let (_, moot) = ft.watch(0, &[0, 1, 2]).expect("watched");
        assert_eq!(moot(), None);
        // An admitted slot, or one that was not a member, leaves the generation able to form.
        log(&store, &["+3", "-3"]);
        assert_eq!(moot(), None);
        // The counter moves before the change is written: nothing to say yet.
        store.add(keys::GENERATION, 1).unwrap();
        assert_eq!(moot(), None);
        store.set(&keys::generation_change(3), b"-2").unwrap();
        assert_eq!(
            moot().as_deref(),
            Some("slot 2 left in generation 3 while generation 0 formed")
        );
        // A later generation's own bootstrap is watched from its own members; a rank that
        // opened a generation after it gave up on this one.
        let (_, later) = ft.watch(3, &[0, 1]).expect("watched");
        assert_eq!(later(), None);
        log(&store, &["+2"]);
        assert_eq!(later(), None);
        store.set(&keys::generation_open(4), b"1").unwrap();
        assert_eq!(
            later().as_deref(),
            Some("generation 4 is open while generation 3 formed")
        );
        store.delete_key(&keys::generation_open(4)).unwrap();
        log(&store, &["end"]);
        assert_eq!(later().as_deref(), Some("the run ended in generation 5"));
        // Whole blocks are not watched.
        let mut island = member(&store, 0, 4, false);
        island.set_block(2);
        assert!(island.watch(0, &[0, 1, 2, 3]).is_none());
    }

    #[test]
    fn a_joiner_waits_for_its_generation_and_finds_the_run_over() {
        let store = Arc::new(HashStore::default());
        let mut joiner = member(&store, 3, 3, true);
        let s = store.clone();
        let end = std::thread::spawn(move || {
            // The joiner's +3 is in; nobody opens its generation, and the run ends.
            while s.add(keys::GENERATION, 0).unwrap() < 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(50));
            log(&s, &["end"]);
        });
        let start = Instant::now();
        assert!(joiner.join().unwrap().is_none());
        end.join().unwrap();
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert_eq!(
            store.get(&keys::generation_change(1)).unwrap(),
            b"+3".to_vec()
        );
        assert!(!store.check(&[&keys::generation_open(1)]).unwrap());
    }
}
