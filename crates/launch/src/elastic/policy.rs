//! The elastic policy of a running round: what it admits, what it goes on without, and the
//! node rank a lost node frees (Note [Node admission] in `admission.rs`, Note [FT generations] in
//! phalanx-pg). A `Round` (`round.rs`) watches the workers and the other nodes; what to do
//! about a node that comes or goes is decided here.

use std::time::Duration;

use phalanx_store::{keys, Store};

use super::admission::Nodes;
use super::coordinate::Coordinator;
use crate::args::Nnodes;
use crate::rdzv::claims::Claim;
use crate::rdzv::Rendezvous;
use crate::summary::RootCause;
use crate::Error;

/// How a round is formed (`--nnodes MIN:MAX`, `--rdzv-last-call`, PHALANX_TIMEOUT) and what
/// it admits and goes on without.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    pub(crate) nnodes: Nnodes,
    pub(crate) last_call: Duration,
    pub(crate) timeout: Duration,
    /// A running round admits arriving nodes and goes on without lost ones (Note
    /// [Node admission]): `--fault-tolerance` with `--nnodes MIN:MAX`, for a program that is not
    /// Python. Whether a Python program re-forms its group (phalanx_torch.ft) is known only
    /// once its workers run, after the rendezvous decided; its nodes meet at the next round.
    pub(crate) fault_tolerance: bool,
    /// `--fault-tolerance` with `--nnodes MIN:MAX` for a Python program: a running round
    /// admits no node, but goes on without a lost one once its workers said that they re-form
    /// their group themselves (phalanx_torch.ft's Manager writes
    /// [`keys::FT_TAKES_PART`]); a program that did not say so restarts as without it.
    pub(crate) goes_on_if_told: bool,
    /// The node whose agent hosts the store (0 under `static` and `c10d`): it closes every
    /// round. `None` under etcd: the first agent in closes it.
    pub(crate) store_host: Option<u32>,
}

impl Rules {
    /// At every monitor tick of a round that admits nodes: the leader (node 0 while it lives)
    /// answers the arrivals, the others take in whom it admitted (Note [Node admission]).
    pub(crate) fn admissions(
        &self,
        coord: &Coordinator,
        nodes: &mut Nodes,
        me: u32,
        claim: &Claim,
    ) {
        if !self.fault_tolerance {
            return;
        }
        let Some(store) = coord.store().filter(|_| coord.answers()) else {
            return;
        };
        let leader = coord.leader() == me;
        // A store that does not answer is the poll's to report, right after this.
        if !matches!(nodes.news(coord.watch(), leader), Ok(true)) {
            return;
        }
        let result = match leader {
            true => nodes.admit_arrivals(store, coord, self.nnodes, claim),
            false => nodes.follow(store, coord),
        };
        if let Err(e) = result {
            eprintln!("phalanx launch: admitting nodes into the running round: {e}");
        }
    }

    /// Node `g` of round `round` was lost (its heartbeat stopped, or its link broke). Returns
    /// whether the round goes on without it (see [`Rules::goes_on_without`]); if so, its ranks
    /// leave the process group (Note [FT generations] in phalanx-pg: one agent records their
    /// deaths, the others' workers re-form the group without them and re-shard the data) and
    /// this agent stops watching it. Either way the leader frees its node rank where ranks
    /// are taken on arrival, so that the node restarted (or another) can take it (Note [c10d
    /// node ranks]); after it was left behind, so that when `g` led, the next leader does.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lose(
        &self,
        coord: &Coordinator,
        store: &dyn Store,
        rdzv: &dyn Rendezvous,
        me: u32,
        (round, nodes): (u32, &Nodes),
        g: u32,
        cause: &RootCause,
    ) -> bool {
        let goes_on = self.goes_on_without(coord, store, round, g);
        if goes_on {
            leave_behind(coord, store, round, nodes, g, cause);
        }
        if coord.leader() == me {
            rdzv.free_node_rank(store, g);
        }
        goes_on
    }

    /// Whether the round goes on without node `g`: it admits nodes (or its Python workers said
    /// they re-form their group), `g` did not host the store, and more than MIN nodes remain.
    /// A static job needs all its nodes: it restarts.
    ///
    /// Note [No node is special]
    /// Node 0's agent hosts the store under `static` and `c10d`, so losing it ends the job
    /// whatever else survives. Under `--rdzv-backend etcd` the store is etcd's, and node 0 is
    /// a node like the others: when it is lost the round goes on without it, and what it did
    /// falls to the lowest node rank left, the round's leader ([`Coordinator::leader`]):
    /// - answering nodes that ask into the running round (it first takes in what the lost
    ///   leader admitted and answered, Note [Node admission]);
    /// - freeing a lost node's rank for the node that comes back (Note [c10d node ranks]);
    /// - waiting last at the exit barrier.
    ///
    /// Without `--fault-tolerance` a lost node fails the round, and `--max-restarts` meets the
    /// survivors in the next one: under etcd its first agent in closes it (Note [Elastic
    /// rounds]), so node 0 need not come, and the program check compares against the round's
    /// lowest node (`warn_other_programs`).
    ///
    /// The workers' side needs nothing: their store is etcd too, and the ranks that remain
    /// re-form their group without the lost node's (Note [FT generations] in phalanx-pg), rank 0
    /// included.
    fn goes_on_without(&self, coord: &Coordinator, store: &dyn Store, round: u32, g: u32) -> bool {
        let store_survives = self.store_host != Some(g);
        let told = || {
            let key = keys::in_round(round, keys::FT_TAKES_PART);
            self.goes_on_if_told && store.check(&[&key]).unwrap_or(false)
        };
        let ft = self.fault_tolerance || told();
        ft && store_survives && coord.member_count() > self.nnodes.min as usize
    }
}

/// The round goes on without node `g`: its ranks leave the process group, recorded once.
fn leave_behind(
    coord: &Coordinator,
    store: &dyn Store,
    round: u32,
    nodes: &Nodes,
    g: u32,
    cause: &RootCause,
) {
    let Some(ranks) = nodes.ranks_of(g) else {
        return;
    };
    eprintln!(
        "phalanx launch: node {g} ({}): {}; --fault-tolerance: the round goes on without it \
         (its ranks {ranks:?} leave the process group, the others keep training)",
        cause.host, cause.what
    );
    coord.drop_member(round, g, ranks);
    record_departures(coord, store, round);
}

/// Records the departures this agent claimed (Note [A departure is recorded once]); called
/// when a node is lost, and on the monitor's quiet ticks while the store answers, for a claim
/// or a record that found no answer before.
///
/// Note [A departure is recorded once]
/// Every surviving agent sees a node go, and its ranks' departure must enter the generation
/// log once: the workers re-form their group when the log's counter moves, and a departure
/// counted twice would bump it twice. So the agents claim it (a compare-and-set on
/// `ft/dropped/<node>`), and the first writes it. A claim can find no answer: losing node 0
/// under etcd can take the leader with it, and the election that follows may outlast a
/// control call's bound. Such a claim stays owed and is tried again at the next tick, rather
/// than given up: given up by every agent at once, nobody records it, and the survivors wait
/// out PHALANX_TIMEOUT for a change that never comes. Trying again is safe because the claim
/// is idempotent: an agent whose claim landed unanswered reads its own name back and wins.
/// A record that fails after the claim is owed by the claimer alone, in two steps: a rank's
/// change is a counter bump and then a key for the generation it gave, so a bump that landed
/// and a key that did not is retried as the key alone (bumping again would leave a generation
/// without its change, which the workers would wait for). A bump whose answer was lost may
/// still count once more; etcd's receipts (Note [etcd receipts] in phalanx-store) make that rare.
pub(crate) fn record_departures(coord: &Coordinator, store: &dyn Store, round: u32) {
    let scope = |k: &str| keys::in_round(round, k);
    for (g, ranks, mut bumped) in coord.claim_departures(round) {
        for r in ranks.clone() {
            let written = (|| {
                let generation = match bumped.take() {
                    Some(generation) => generation,
                    None => keys::bump_generation(store, &scope).map_err(|e| (None, e))?,
                };
                keys::write_generation_change(store, &scope, generation, &format!("-{r}"))
                    .map_err(|e| (Some(generation), e))
            })();
            if let Err((at, e)) = written {
                eprintln!(
                    "phalanx launch: recording rank {r}'s departure: {e}; trying again at the \
                     next tick"
                );
                coord.owe_record(round, g, r..ranks.end, at);
                break;
            }
        }
    }
}

/// Appends a membership change to round `round`'s generation log (Note [FT generations]): bumps
/// the counter, then writes what changed; returns the new generation.
pub(crate) fn record_change(store: &dyn Store, round: u32, what: &str) -> Result<u64, Error> {
    keys::append_generation_change(store, &|k| keys::in_round(round, k), what).map_err(|e| {
        Error::Store {
            op: "generation log",
            key: keys::in_round(round, keys::GENERATION),
            reason: e.to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use phalanx_store::{Auth, StoreServer, TcpStore};

    use super::*;

    fn agent(store: &Arc<dyn Store>, g: u32) -> Coordinator {
        let s = Duration::from_secs(1);
        Coordinator::new(store.clone(), 3, g, format!("h{g}"), s, s)
    }

    /// Note [A departure is recorded once]: with the store silent (an election) no agent can
    /// claim node 0's departure; the claim stays owed, and once the store answers again one
    /// of the two survivors records each of its ranks, once.
    #[test]
    fn a_departure_claimed_while_the_store_is_silent_is_recorded_once_it_answers() {
        let auth = Auth::random("departure");
        let server = StoreServer::bind("127.0.0.1:0".parse().unwrap(), auth.clone()).unwrap();
        let addr = server.local_addr();
        let tcp = TcpStore::connect(&addr.to_string(), &auth, Duration::from_millis(300));
        let store: Arc<dyn Store> = Arc::new(tcp.unwrap());
        let (a1, a2) = (agent(&store, 1), agent(&store, 2));
        server.shutdown();
        for a in [&a1, &a2] {
            a.drop_member(7, 0, 0..2);
            record_departures(a, &*store, 7);
        }
        let server = StoreServer::bind(addr, auth).unwrap();
        let log = |k: &str| store.get(&keys::in_round(7, k)).unwrap();
        assert!(!store
            .check(&[&keys::in_round(7, keys::GENERATION)])
            .unwrap());
        for a in [&a2, &a1, &a2] {
            record_departures(a, &*store, 7);
        }
        assert_eq!(
            store.add(&keys::in_round(7, keys::GENERATION), 0).unwrap(),
            2
        );
        let changes = [keys::generation_change(1), keys::generation_change(2)];
        assert_eq!([log(&changes[0]), log(&changes[1])], [b"-0", b"-1"]);
        assert!(a1.claim_departures(7).is_empty() && a2.claim_departures(7).is_empty());
        drop(server);
    }
}
