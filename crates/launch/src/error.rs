//! The error type of `phalanx-launch`: operator errors, each a sentence naming the flag, node,
//! rank or address involved.

use std::path::PathBuf;

/// Errors of the launcher that the operator can act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A flag (or its `PET_*` variable) has a value that cannot be used.
    #[error("{flag} {reason}")]
    BadFlag {
        /// The flag, e.g. `--node-rank`.
        flag: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// Nothing to run.
    #[error("no program given: use `phalanx launch [flags] -- PROGRAM ARGS...`")]
    NoProgram,
    /// The program flags contradict each other (`-m` with `--no-python`).
    #[error("{0}")]
    ProgramRules(String),
    /// A multi-node job without a shared secret.
    #[error(
        "--nnodes {nnodes} needs a shared job secret: set the same PHALANX_TOKEN on every node \
         (for example `export PHALANX_TOKEN=$(openssl rand -hex 32)`), so that only this job's \
         agents and workers can use the store"
    )]
    MissingToken {
        /// The node count asked for.
        nnodes: u32,
    },
    /// The store could not listen on the master address.
    #[error(
        "node 0 cannot host the store on {addr} (--master-addr:--master-port): {reason}; \
         choose another --master-port, or --standalone for a free one"
    )]
    Bind {
        /// The address tried.
        addr: String,
        /// The operating system's reason, with the process holding the port when known.
        reason: String,
    },
    /// The master address does not resolve.
    #[error("--master-addr {addr:?} does not resolve to an address: {reason}")]
    Resolve {
        /// The address given.
        addr: String,
        /// The resolver's reason.
        reason: String,
    },
    /// The store on node 0 could not be reached.
    #[error("cannot reach the store of node 0 at {addr} (tried for {waited_s:.0} s): {reason}")]
    Unreachable {
        /// The address tried.
        addr: String,
        /// How long the agent kept retrying.
        waited_s: f64,
        /// The last error.
        reason: String,
    },
    /// The etcd cluster that holds the job's store (`--rdzv-backend etcd`) failed.
    #[error("the job's store in etcd: {reason}")]
    Etcd {
        /// etcd's error, which names the endpoints and the operation.
        reason: String,
    },
    /// Two agents were started with the same `--node-rank`.
    #[error(
        "two agents claim --node-rank {node_rank} in round {round}: this one on {host} and \
         another on {other}; give each node a distinct --node-rank"
    )]
    DuplicateNodeRank {
        /// The node rank claimed twice.
        node_rank: u32,
        /// The rendezvous round.
        round: u32,
        /// This agent's host.
        host: String,
        /// The other agent's host.
        other: String,
    },
    /// Agents disagree on the number of nodes, so WORLD_SIZE would differ between them.
    #[error(
        "node {node_rank} was started with --nnodes {theirs} but this node (node {mine_rank}) \
         with --nnodes {mine}: WORLD_SIZE would differ; start every node with the same --nnodes"
    )]
    InconsistentNnodes {
        /// The other node.
        node_rank: u32,
        /// Its `--nnodes`.
        theirs: String,
        /// This node.
        mine_rank: u32,
        /// This node's `--nnodes`.
        mine: String,
    },
    /// Node 0 refused to admit this node into the running round, or could not (Note
    /// [Node admission]).
    #[error("node {node_rank} was not admitted into running round {round}: {reason}")]
    NotAdmitted {
        /// This node.
        node_rank: u32,
        /// The running round.
        round: u32,
        /// Why, in a sentence.
        reason: String,
    },
    /// An elastic round did not reach `MIN` nodes in time.
    #[error(
        "elastic rendezvous round {round}: {joined} of at least {min} node(s) joined within \
         {waited_s:.0} s (PHALANX_TIMEOUT); nodes in: {members:?}. Start more nodes with the \
         same --master-addr/--master-port and PHALANX_TOKEN, or lower MIN in --nnodes MIN:MAX"
    )]
    ElasticTimeout {
        /// The round.
        round: u32,
        /// How many nodes joined.
        joined: u32,
        /// `MIN` of `--nnodes MIN:MAX`.
        min: u32,
        /// Node ranks that joined.
        members: Vec<u32>,
        /// Seconds waited.
        waited_s: f64,
    },
    /// Some nodes never joined the rendezvous.
    #[error(
        "rendezvous round {round}: node(s) {missing:?} of --nnodes {nnodes} did not join within \
         {waited_s:.0} s (PHALANX_TIMEOUT); check that they were started with the same \
         --master-addr/--master-port and PHALANX_TOKEN"
    )]
    RendezvousTimeout {
        /// The round.
        round: u32,
        /// Node ranks that did not join.
        missing: Vec<u32>,
        /// The node count.
        nnodes: u32,
        /// Seconds waited.
        waited_s: f64,
    },
    /// A store operation failed.
    #[error("store operation {op} on key {key:?} failed: {reason}")]
    Store {
        /// The operation.
        op: &'static str,
        /// The key.
        key: String,
        /// The store's error.
        reason: String,
    },
    /// A worker could not be started.
    #[error("cannot start local rank {local_rank} ({program}): {reason}")]
    Spawn {
        /// The local rank.
        local_rank: u32,
        /// The program.
        program: String,
        /// The operating system's reason.
        reason: String,
    },
    /// A log file could not be created.
    #[error("cannot create log file {path}: {reason}")]
    LogFile {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
}
