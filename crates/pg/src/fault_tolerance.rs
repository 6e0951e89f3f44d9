//! [`FaultTolerance`]: a rank's way back into a working process group after another rank died,
//! without leaving the process (`phalanx launch --fault-tolerance`).
//!
//! Note [Generations]: under `--fault-tolerance` a round's process group lives in
//! *generations*. Generation 0 is the group the round starts (keys under the round's prefix).
//! When a worker dies, its node's agent does not end the round: it bumps the round's counter
//! [`keys::GENERATION`] to `g` and starts a replacement for the dead rank only, with
//! `PHALANX_FT_GENERATION=g`. The surviving ranks see their group fail (the dead rank's
//! sockets close, so the failing collective ends at once), wait for the counter to pass their
//! generation, and connect a fresh group, generation `g`, under the key prefix `ft/<g>` of the
//! round: new addresses, new connections, new shared memory, nothing read from a dead
//! generation. The replacement joins the same generation directly. What happens next is the
//! program's (the trainer re-synchronises its state from a healthy peer, `phalanx-train`).
//!
//! Only the agent moves the counter, and only when it has started a replacement, so a
//! surviving rank that sees nothing move within `PHALANX_TIMEOUT` knows that no replacement is
//! coming (a whole node was lost, or the budget `--max-restarts` is spent) and fails with
//! [`Error::Regroup`]; its exit code tells the agent not to replace it in turn.
//!
//! ```no_run
//! # fn step(pg: &phalanx_pg::ProcessGroup) -> phalanx_pg::Result<()> { Ok(()) }
//! use phalanx_pg::FaultTolerance;
//! let mut ft = FaultTolerance::from_env()?.expect("started by phalanx launch --fault-tolerance");
//! let mut pg = ft.join()?;
//! loop {
//!     match step(&pg) {
//!         Ok(()) => {}
//!         Err(e) if pg.failure().is_some() => pg = ft.regroup(e)?, // then resynchronise state
//!         Err(e) => return Err(e),
//!     }
//! }
//! # Ok::<(), phalanx_pg::Error>(())
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use phalanx_core::env;
use phalanx_store::{keys, PrefixStore, Store, TcpStore};

use crate::{init_with, Error, InitOptions, ProcessGroup, Result};

/// How often a surviving rank looks at the generation counter while it waits.
const POLL: Duration = Duration::from_millis(10);

/// A rank's membership in the generations of its round (Note [Generations]).
pub struct FaultTolerance {
    /// The options of generation 0, from the environment.
    base: InitOptions,
    /// The round's keys (the launcher's store, under `PHALANX_STORE_PREFIX`).
    round: Arc<dyn Store>,
    /// The generation this rank is in (or joins next).
    generation: u64,
    /// The generation this process started in: above 0 for a replacement.
    started_in: u64,
}

impl std::fmt::Debug for FaultTolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultTolerance")
            .field("rank", &self.base.env.rank)
            .field("generation", &self.generation)
            .field("started_in", &self.started_in)
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
        let generation = match env::get(env::PHALANX_FT_GENERATION) {
            None => 0,
            Some(v) => v.parse().map_err(|_| Error::Env {
                name: "PHALANX_FT_GENERATION".into(),
                value: v.clone(),
                reason: "expected a generation number (0, 1, 2, …)".into(),
            })?,
        };
        let rank = base.env.rank;
        let addr = format!("{}:{}", base.env.master_addr, base.env.master_port);
        let client = TcpStore::connect(&addr, &base.auth, base.timeout)
            .map_err(|source| Error::Store { rank, source })?;
        let round: Arc<dyn Store> = Arc::new(PrefixStore::new(
            base.store_prefix.trim_end_matches('/').to_string(),
            Arc::new(client),
        ));
        Ok(Some(FaultTolerance {
            base,
            round,
            generation,
            started_in: generation,
        }))
    }

    /// The generation this rank is in.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether this process replaces a rank that died (it started in a later generation than
    /// the round's first): it has no state of its own and takes a peer's.
    pub fn is_replacement(&self) -> bool {
        self.started_in > 0
    }

    /// Connects the process group of the current generation.
    pub fn join(&self) -> Result<ProcessGroup> {
        let mut opts = self.base.clone();
        if let Some(sub) = keys::generation_prefix(self.generation) {
            opts.store_prefix = format!("{}/{sub}", opts.store_prefix.trim_end_matches('/'));
        }
        tracing::info!(
            rank = opts.env.rank,
            generation = self.generation,
            "phalanx: joining process-group generation {}",
            self.generation
        );
        init_with(opts)
    }

    /// After `failure` broke this rank's group: waits (up to `PHALANX_TIMEOUT`) for the agent
    /// to start a replacement, then connects the newest generation's group. Without a new
    /// generation in time, [`Error::Regroup`] names the failure and the wait.
    pub fn regroup(&mut self, failure: Error) -> Result<ProcessGroup> {
        let rank = self.base.env.rank;
        let start = Instant::now();
        let store_err = |source| Error::Store { rank, source };
        loop {
            let newest = self.newest().map_err(store_err)?;
            if newest > self.generation {
                self.generation = newest;
                match self.join() {
                    Ok(pg) => return Ok(pg),
                    // Another rank died while this generation formed: the next one is coming.
                    Err(_) if self.newest().map_err(store_err)? > newest => continue,
                    Err(e) => return Err(e),
                }
            }
            if start.elapsed() >= self.base.timeout {
                return Err(Error::Regroup {
                    rank,
                    generation: self.generation,
                    waited_s: start.elapsed().as_secs_f64(),
                    cause: failure.to_string(),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// The round's newest generation, as the agents have counted it.
    fn newest(&self) -> phalanx_store::Result<u64> {
        Ok(self.round.add(keys::GENERATION, 0)?.max(0) as u64)
    }
}
