//! This node's job: its identity and what every round starts from ([`Job`]), and the plan of
//! one round ([`Plan`]: the rendezvous, the members, where the PyTorch store is). A round's
//! workers are `round.rs`'s.

use std::cell::Cell;
use std::ffi::OsString;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use phalanx_store::Store;

use crate::elastic::admission::Nodes;
use crate::elastic::coordinate::Coordinator;
use crate::elastic::{Membership, Rules};
use crate::output::{Console, Sink};
use crate::rdzv::claims::{rendezvous, Claim};
use crate::rdzv::Rendezvous;
use crate::signals;
use crate::worker::Spec;
use crate::worker_env::{substitute_args, worker_env, JobEnv, Layout};
use crate::{Error, LaunchArgs};

/// The job's identity on this node, what every round starts from: the flags, the program,
/// and what the agent set up once (the rendezvous backend, the store, the rules).
pub(crate) struct Job<'a> {
    /// The flags, as given (Note [A launch plan resolved once] in `agent.rs`).
    pub(crate) args: &'a LaunchArgs,
    /// This node's rank: `--node-rank`, or the one it took on arrival (`c10d`, `etcd`).
    pub(crate) node_rank: u32,
    /// How rounds are formed, what they admit and go on without (`elastic/policy.rs`).
    pub(crate) rules: Rules,
    pub(crate) program: &'a [OsString],
    /// What the nodes compare to agree that they run the same program.
    pub(crate) signature: String,
    pub(crate) run_id: String,
    /// The job's secret, hex, handed to the workers.
    pub(crate) token_hex: String,
    /// How the agents met (`rdzv/`): who hosts the store, where each round's PyTorch store
    /// is, what to give back at the end.
    pub(crate) rdzv: Box<dyn Rendezvous>,
    /// This machine's host name, in rendezvous claims.
    pub(crate) host: String,
    /// Identifies this agent in rendezvous claims.
    pub(crate) nonce: String,
    /// The interface of `--local-addr`, for the workers' mesh.
    pub(crate) local_ifname: Option<String>,
    /// Set OMP_NUM_THREADS=1 in the workers (it was unset and nproc > 1).
    pub(crate) set_omp: bool,
    /// The agent's handle on the store for the rendezvous, bounded by PHALANX_TIMEOUT.
    pub(crate) store: Arc<dyn Store>,
    /// `--rdzv-backend etcd`: how the workers reach the job's store in etcd.
    pub(crate) etcd: Option<phalanx_store::EtcdOptions>,
    /// PHALANX_TIMEOUT.
    pub(crate) timeout: Duration,
    /// Restarts used of `--max-restarts`: the group's restarts and, under
    /// `--fault-tolerance`, single replacements.
    pub(crate) restarts_used: Cell<u32>,
}

/// One round as the rendezvous decided it, before its workers start.
pub(crate) struct Plan {
    /// The round's number (an elastic job: the round this node joined).
    pub(crate) round: u32,
    /// This node's ranks in it.
    pub(crate) layout: Layout,
    /// The nodes in it and their ranks.
    pub(crate) nodes: Nodes,
    /// Admitted into a running round: the world size it started with.
    pub(crate) joined: Option<u32>,
    /// `MASTER_ADDR`/`MASTER_PORT` for its workers.
    pub(crate) master: (String, u16),
}

impl Job<'_> {
    /// Meets the other nodes for round `round` (in an elastic job, the newest open round from
    /// `round` on) and plans it; `None` when a signal interrupted the rendezvous.
    pub(crate) fn plan(&self, coord: &Coordinator, round: u32) -> Result<Option<Plan>, Error> {
        let Some(Membership {
            round,
            layout,
            members,
            admitted,
        }) = self.layout(round)?
        else {
            return Ok(None);
        };
        if let Some(a) = admitted {
            eprintln!(
                "phalanx launch: round {round}: admitted into the running round (nodes {:?}); \
                 this node's ranks {}..{} join the running ones",
                a.live,
                layout.base_rank,
                layout.base_rank + layout.local_world_size
            );
            let master = self.master(&a.live)?;
            coord.set_members(a.live);
            let nodes = Nodes::new(round, a.nodes, a.admissions);
            return Ok(Some(Plan {
                round,
                layout,
                nodes,
                joined: Some(a.first_world),
                master,
            }));
        }
        if self.args.dynamic_rounds() {
            eprintln!(
                "phalanx launch: round {round}: nodes {members:?} ({} workers; this node is \
                 group rank {})",
                layout.world_size, layout.group_rank
            );
        }
        if self.args.nnodes.max > 1 {
            crate::rdzv::claims::warn_other_programs(
                &*self.store,
                round,
                &members,
                self.node_rank,
                &self.claim(),
            );
        }
        let master = self.master(&members)?;
        coord.set_members(members.clone());
        let nodes = members.iter().copied().zip(layout.sizes.iter().copied());
        let nodes = Nodes::new(round, nodes.collect(), 0);
        Ok(Some(Plan {
            round,
            layout,
            nodes,
            joined: None,
            master,
        }))
    }

    /// `MASTER_ADDR`/`MASTER_PORT` for a round of `members`: the store's host, or under etcd
    /// the address the round's first node published (`rdzv/etcd.rs`).
    fn master(&self, members: &[u32]) -> Result<(String, u16), Error> {
        self.rdzv.master(&*self.store, members)
    }

    /// Whether a worker of round `round` said it re-forms its group itself
    /// ([`phalanx_store::keys::FT_TAKES_PART`]); an unreachable store counts as no.
    pub(crate) fn takes_part(&self, round: u32) -> bool {
        use phalanx_store::keys;
        let key = keys::in_round(round, keys::FT_TAKES_PART);
        self.store.check(&[&key]).unwrap_or(false)
    }

    /// This agent's claim in every round's rendezvous.
    pub(crate) fn claim(&self) -> Claim {
        let nnodes = self.args.nnodes;
        Claim {
            nproc: self.args.nproc_per_node,
            nnodes: nnodes.max,
            min_nnodes: if self.args.dynamic_rounds() {
                nnodes.min
            } else {
                0
            },
            nonce: self.nonce.clone(),
            host: self.host.clone(),
            program: self.signature.clone(),
        }
    }

    /// This node's place in round `round` (an elastic job: the round it joined) and the node
    /// ranks in it; `None` when a signal interrupted the rendezvous.
    fn layout(&self, round: u32) -> Result<Option<Membership>, Error> {
        let nnodes = self.args.nnodes;
        let fixed = |layout, members| Membership {
            round,
            layout,
            members,
            admitted: None,
        };
        if nnodes.max == 1 {
            let layout = Layout::from_sizes(0, &[self.args.nproc_per_node]);
            return Ok(Some(fixed(layout, vec![0])));
        }
        let claim = self.claim();
        if self.args.dynamic_rounds() {
            let joined = crate::elastic::join(
                &*self.store,
                round,
                self.node_rank,
                &claim,
                &self.rules,
                &mut || signals::pending(),
            )?;
            return Ok(joined);
        }
        let layout = rendezvous(
            &*self.store,
            round,
            self.node_rank,
            &claim,
            self.timeout,
            &mut || signals::pending(),
        )?;
        Ok(layout.map(|l| fixed(l, (0..nnodes.max).collect())))
    }

    /// How local worker `lr` of a round with `env` and `layout` is started: its program and
    /// arguments, environment, output prefixes and log files (under `attempt_dir`).
    pub(crate) fn spec(
        &self,
        job: &JobEnv,
        layout: &Layout,
        lr: u32,
        attempt_dir: Option<&PathBuf>,
    ) -> Result<Spec<'_>, Error> {
        let rank = layout.rank(lr);
        let prefix = self.args.line_prefix(rank, lr).into_bytes();
        let shown = self.args.shows(lr);
        let teed = self.args.logged_streams(lr);
        let redirected = self.args.redirected_streams(lr);
        let dir = attempt_dir.map(|d| d.join(lr.to_string()));
        if let Some(d) = &dir {
            std::fs::create_dir_all(d).map_err(|e| Error::LogFile {
                path: d.clone(),
                reason: e.to_string(),
            })?;
        }
        let file = |name: &str, on: bool| -> Result<Option<File>, Error> {
            match (&dir, on) {
                (Some(d), true) => {
                    let path = d.join(name);
                    File::create(&path).map(Some).map_err(|e| Error::LogFile {
                        path,
                        reason: e.to_string(),
                    })
                }
                _ => Ok(None),
            }
        };
        Ok(Spec {
            program: &self.program[0],
            args: substitute_args(&self.program[1..], lr),
            env: worker_env(job, layout, lr),
            local_rank: lr,
            rank,
            stdout: Sink {
                prefix: prefix.clone(),
                console: (shown && !redirected.stdout()).then_some(Console::Stdout),
                file: file("stdout.log", teed.stdout())?,
            },
            stderr: Sink {
                prefix,
                console: (shown && !redirected.stderr()).then_some(Console::Stderr),
                file: file("stderr.log", teed.stderr())?,
            },
            error_file: dir.map(|d| d.join("error.json")),
        })
    }
}
