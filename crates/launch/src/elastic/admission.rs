//! Admitting a node into a running round (`--fault-tolerance` with `--nnodes MIN:MAX`).
//!
//! Note [Node admission]
//! Without fault tolerance a node that arrives while a round runs joins the next round, and
//! every running agent ends its round to meet it there: all workers restart from the newest
//! checkpoint (Note [Elastic rounds] in `elastic/mod.rs`). Under `--fault-tolerance` the running
//! workers can take new ranks in process (Note [FT generations] in phalanx-pg), so the arriving
//! node is admitted into the running round instead, and nobody restarts. Keys, in round `r`
//! (`agent/<r>/…`):
//!
//! - `ft/arrivals`: a counter; an arriving agent takes ticket `t` from it and writes
//!   `ft/arrival/<t>` = `<node rank> <claim JSON>`.
//! - `ft/answer/<t>`: the leader's answer, `admitted <k> <live node ranks, comma-separated>` or
//!   `refused <sentence>`.
//! - `ft/admissions`: a counter of admissions; `ft/admission/<k>` = `<node rank> <workers>
//!   <host>`, written before the counter moves.
//!
//! The round's leader answers the arrivals in ticket order at every monitor tick. The leader is
//! the lowest node rank alive in the round: node 0 while it lives, and under etcd, where losing
//! node 0 does not end the job, the next one after it (Note [No node is special] in `policy.rs`).
//! It answers like this: a node started
//! with another `--nnodes` is refused by name; one whose node rank is still in the round
//! waits until that node leaves (a node coming back before its old heartbeat ran out), and
//! `ft/waiting/<t>` says so, for its error if the wait runs out. Node ranks are below MAX, so
//! a node that is not in the round always finds a place. The other agents read new admissions at their
//! tick and watch the new node's heartbeat from then (and count it in the exit barrier).
//!
//! The round's nodes are kept in *slot order*: the rendezvous' members, then each admitted
//! node, whose ranks are numbered after every rank the round has had (a node that was lost and
//! comes back gets new ones). Its workers start as replacements do (`PHALANX_FT_REPLACEMENT`,
//! with `PHALANX_FT_SLOTS` the round's first world size): they load the data and build the
//! model, then join the running ranks at a step boundary and take their state.
//!
//! The round may end before the leader answers: a failure sends the agents to the next round, and
//! the arriving agent, seeing it open, joins it as usual; a round whose nodes are finishing
//! (its exit barrier has begun) has no place left, and the arriving agent stops with a sentence.

use std::ops::Range;
use std::time::{Duration, Instant};

use phalanx_store::{keys, Store};

use super::coordinate::Coordinator;
use crate::args::Nnodes;
use crate::rdzv::claims::{store_err, Claim};
use crate::Error;

/// How often an arriving agent looks for the leader's answer.
const POLL: Duration = Duration::from_millis(50);

const ARRIVALS: &str = "ft/arrivals";
const ADMISSIONS: &str = "ft/admissions";

fn arrival(t: i64) -> String {
    format!("ft/arrival/{t}")
}

fn answer(t: i64) -> String {
    format!("ft/answer/{t}")
}

fn waiting(t: i64) -> String {
    format!("ft/waiting/{t}")
}

fn admission(k: u64) -> String {
    format!("ft/admission/{k}")
}

/// A node's place in a running round, as the leader admitted it.
#[derive(Debug)]
pub(crate) struct Admitted {
    /// The round's nodes in slot order (node rank, workers), this one last.
    pub(crate) nodes: Vec<(u32, u32)>,
    /// The nodes alive in the round, this one included.
    pub(crate) live: Vec<u32>,
    /// The round's first world size (`PHALANX_FT_SLOTS`).
    pub(crate) first_world: u32,
    /// The admissions so far, this one's included.
    pub(crate) admissions: u64,
}

/// What came of asking to be admitted.
pub(crate) enum Arrival {
    Admitted(Admitted),
    /// The round ended (a newer one is open): join that one.
    Moved,
    /// A signal arrived.
    Interrupted,
}

/// An arriving node's request: node `group_rank`, started as `claim`, asks into running round
/// `round`, whose rendezvous members were `first` (node rank, workers).
pub(crate) struct Request<'a> {
    pub(crate) round: u32,
    pub(crate) group_rank: u32,
    pub(crate) claim: &'a Claim,
    pub(crate) first: &'a [(u32, u32)],
}

/// The arriving side: asks the round's leader to admit the node into the running round and waits for the
/// answer (up to `timeout`). `moved_on` says whether a newer round is open.
pub(crate) fn arrive(
    store: &dyn Store,
    request: &Request<'_>,
    timeout: Duration,
    moved_on: &mut dyn FnMut() -> Result<bool, Error>,
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<Arrival, Error> {
    let &Request {
        round,
        group_rank,
        claim,
        first,
    } = request;
    let k = |key: &str| keys::agent(round, key);
    let counter = k(ARRIVALS);
    let ticket = store
        .add(&counter, 1)
        .map_err(|e| store_err("add", &counter, e))?;
    let text = format!(
        "{group_rank} {}",
        serde_json::to_string(claim).expect("a claim serialises")
    );
    let key = k(&arrival(ticket));
    store
        .set(&key, text.as_bytes())
        .map_err(|e| store_err("set", &key, e))?;
    eprintln!(
        "phalanx launch: round {round} is running: asking its leader (its lowest node rank) \
         to admit this node into it (--fault-tolerance)"
    );
    let answer_key = k(&answer(ticket));
    let done = k("done");
    let start = Instant::now();
    loop {
        if store
            .check(&[&answer_key])
            .map_err(|e| store_err("check", &answer_key, e))?
        {
            let text = store
                .get(&answer_key)
                .map_err(|e| store_err("get", &answer_key, e))?;
            let text = String::from_utf8_lossy(&text).into_owned();
            return match text.split_once(' ') {
                Some(("refused", why)) => Err(Error::NotAdmitted {
                    node_rank: group_rank,
                    round,
                    reason: why.to_string(),
                }),
                Some(("admitted", rest)) => {
                    admitted(store, round, first, rest).map(Arrival::Admitted)
                }
                _ => Err(Error::Store {
                    op: "admission",
                    key: answer_key,
                    reason: format!("unreadable answer {text:?}"),
                }),
            };
        }
        if moved_on()? {
            return Ok(Arrival::Moved);
        }
        if store
            .add(&done, 0)
            .map_err(|e| store_err("add", &done, e))?
            > 0
        {
            return Err(Error::NotAdmitted {
                node_rank: group_rank,
                round,
                reason: "its nodes are finishing (their workers are done): the job is over".into(),
            });
        }
        if interrupted() {
            return Ok(Arrival::Interrupted);
        }
        if start.elapsed() >= timeout {
            let waiting = k(&waiting(ticket));
            let why = match store.check(&[&waiting]) {
                Ok(true) => store.get(&waiting).ok(),
                _ => None,
            };
            return Err(Error::NotAdmitted {
                node_rank: group_rank,
                round,
                reason: format!(
                    "its leader did not admit it within {:.0} s (PHALANX_TIMEOUT): {}",
                    start.elapsed().as_secs_f64(),
                    why.map_or_else(
                        || "its agents are gone".to_string(),
                        |w| String::from_utf8_lossy(&w).into_owned()
                    )
                ),
            });
        }
        std::thread::sleep(POLL);
    }
}

/// The place the leader gave: `rest` is `<k> <live>` of its answer.
fn admitted(
    store: &dyn Store,
    round: u32,
    first: &[(u32, u32)],
    rest: &str,
) -> Result<Admitted, Error> {
    let bad = || Error::Store {
        op: "admission",
        key: keys::agent(round, "ft/answer"),
        reason: format!("unreadable answer {rest:?}"),
    };
    let (k, live) = rest.split_once(' ').ok_or_else(bad)?;
    let k: u64 = k.parse().map_err(|_| bad())?;
    let live = live
        .split(',')
        .map(|g| g.parse().map_err(|_| bad()))
        .collect::<Result<Vec<u32>, Error>>()?;
    let mut nodes = first.to_vec();
    for i in 1..=k {
        let (g, n, _) = read_admission(store, round, i)?;
        nodes.push((g, n));
    }
    Ok(Admitted {
        nodes,
        live,
        first_world: first.iter().map(|&(_, n)| n).sum(),
        admissions: k,
    })
}

/// Admission `k` of round `round`: node rank, workers, host.
fn read_admission(store: &dyn Store, round: u32, k: u64) -> Result<(u32, u32, String), Error> {
    let key = keys::agent(round, &admission(k));
    let text = store.get(&key).map_err(|e| store_err("get", &key, e))?;
    let text = String::from_utf8_lossy(&text);
    let mut parts = text.split(' ');
    let parsed = (|| {
        let g = parts.next()?.parse().ok()?;
        let n = parts.next()?.parse().ok()?;
        Some((g, n, parts.next().unwrap_or("?").to_string()))
    })();
    parsed.ok_or_else(|| Error::Store {
        op: "admission",
        key,
        reason: format!("unreadable admission {text:?}"),
    })
}

/// The nodes a round has had, in slot order (Note [Node admission]), and how far this agent has
/// read (or, on the leader, answered) the round's arrivals.
pub(crate) struct Nodes {
    round: u32,
    /// (node rank, workers), in slot order: a node's ranks follow every earlier entry's.
    list: Vec<(u32, u32)>,
    /// Admissions read (the leader: made).
    seen: u64,
    /// Node 0: arrivals answered.
    answered: i64,
    /// Node 0: why the first unanswered arrival waits has been said.
    waiting_told: bool,
}

impl Nodes {
    /// The round's nodes in slot order (node rank, workers): its rendezvous' members, and for
    /// an admitted node the `admissions` before and including its own.
    pub(crate) fn new(round: u32, list: Vec<(u32, u32)>, admissions: u64) -> Nodes {
        Nodes {
            round,
            list,
            seen: admissions,
            answered: 0,
            waiting_told: false,
        }
    }

    /// The ranks of node `g`'s newest place in the round.
    pub(crate) fn ranks_of(&self, g: u32) -> Option<Range<u32>> {
        let at = self.list.iter().rposition(|&(m, _)| m == g)?;
        let base: u32 = self.list[..at].iter().map(|&(_, n)| n).sum();
        Some(base..base + self.list[at].1)
    }

    /// Whether there is anything to take in (admissions this agent has not read) or, for the
    /// `leader`, to answer (arrivals): two counters read through `watch`, the monitor's
    /// short-bounded handle, so that a tick with nothing new does not wait out an etcd
    /// election (Note [The monitor does not wait out an election] in `coordinate.rs`).
    pub(crate) fn news(&self, watch: &dyn Store, leader: bool) -> Result<bool, Error> {
        let counter = keys::agent(self.round, ADMISSIONS);
        let made = watch
            .add(&counter, 0)
            .map_err(|e| store_err("add", &counter, e))?;
        if u64::try_from(made).unwrap_or(0) > self.seen {
            return Ok(true);
        }
        if !leader {
            return Ok(false);
        }
        let counter = keys::agent(self.round, ARRIVALS);
        let arrivals = watch
            .add(&counter, 0)
            .map_err(|e| store_err("add", &counter, e))?;
        Ok(arrivals > self.answered)
    }

    /// The round's leader (node 0, or under etcd the lowest node left: Note [No node is
    /// special]), at every monitor tick: answers the arrivals waiting (Note [Node admission]).
    pub(crate) fn admit_arrivals(
        &mut self,
        store: &dyn Store,
        coord: &Coordinator,
        nnodes: Nnodes,
        mine: &Claim,
    ) -> Result<(), Error> {
        let round = self.round;
        let k = |key: &str| keys::agent(round, key);
        let counter = k(ARRIVALS);
        let arrivals = store
            .add(&counter, 0)
            .map_err(|e| store_err("add", &counter, e))?;
        // A leader that took over from a lost one (Note [No node is special]) first takes in
        // the admissions and answers the lost one made.
        self.follow(store, coord)?;
        while self.answered < arrivals
            && store
                .check(&[&k(&answer(self.answered + 1))])
                .map_err(|e| store_err("check", &k(&answer(self.answered + 1)), e))?
        {
            self.answered += 1;
        }
        while self.answered < arrivals {
            let t = self.answered + 1;
            let key = k(&arrival(t));
            // The ticket is taken before the request is written.
            if !store
                .check(&[&key])
                .map_err(|e| store_err("check", &key, e))?
            {
                return Ok(());
            }
            let text = store.get(&key).map_err(|e| store_err("get", &key, e))?;
            let text = String::from_utf8_lossy(&text).into_owned();
            let request = text.split_once(' ').and_then(|(g, c)| {
                Some((
                    g.parse::<u32>().ok()?,
                    serde_json::from_str::<Claim>(c).ok()?,
                ))
            });
            let reply = match request {
                None => format!(
                    "refused node {} (the round's leader) could not read its request {text:?}",
                    coord.leader()
                ),
                Some((g, c)) if c.nnodes != mine.nnodes || c.min_nnodes != mine.min_nnodes => {
                    let theirs = Nnodes {
                        min: c.min_nnodes,
                        max: c.nnodes,
                    };
                    format!(
                        "refused node {g} was started with --nnodes {theirs} but node {} with \
                         --nnodes {nnodes}; start every node with the same --nnodes",
                        coord.leader()
                    )
                }
                // Node ranks are below MAX, so a full round only has ranks in use. The node
                // may be coming back before its old agent's heartbeat ran out: wait for that.
                Some((g, c)) if coord.is_member(g) => {
                    if !self.waiting_told {
                        self.waiting_told = true;
                        let why = format!(
                            "node rank {g} is still in round {round}: it is admitted once that \
                             node leaves (its heartbeat stops); if another node runs with that \
                             rank, give each node its own --node-rank"
                        );
                        eprintln!("phalanx launch: a node on {} waits: {why}", c.host);
                        let key = k(&waiting(t));
                        store
                            .set(&key, why.as_bytes())
                            .map_err(|e| store_err("set", &key, e))?;
                    }
                    return Ok(());
                }
                Some((g, c)) => {
                    if !c.program.is_empty() && c.program != mine.program {
                        eprintln!(
                            "phalanx launch: warning: node {g} runs `{}` but this node (node {}) \
                             runs `{}`; every node should run the same program",
                            c.program,
                            coord.leader(),
                            mine.program
                        );
                    }
                    self.admit(store, coord, g, &c)?;
                    let live: Vec<String> = coord.members().iter().map(u32::to_string).collect();
                    format!("admitted {} {}", self.seen, live.join(","))
                }
            };
            let key = k(&answer(t));
            store
                .set(&key, reply.as_bytes())
                .map_err(|e| store_err("set", &key, e))?;
            self.answered = t;
            self.waiting_told = false;
        }
        Ok(())
    }

    /// Node 0: records node `g`'s admission (its place first, then the counter).
    fn admit(
        &mut self,
        store: &dyn Store,
        coord: &Coordinator,
        g: u32,
        claim: &Claim,
    ) -> Result<(), Error> {
        let k = self.seen + 1;
        let key = keys::agent(self.round, &admission(k));
        let text = format!("{g} {} {}", claim.nproc, claim.host);
        store
            .set(&key, text.as_bytes())
            .map_err(|e| store_err("set", &key, e))?;
        let counter = keys::agent(self.round, ADMISSIONS);
        store
            .add(&counter, 1)
            .map_err(|e| store_err("add", &counter, e))?;
        self.seen = k;
        self.place(coord, g, claim.nproc, &claim.host);
        Ok(())
    }

    /// Any agent but the leader, at every monitor tick: takes in the nodes admitted since the
    /// last.
    pub(crate) fn follow(&mut self, store: &dyn Store, coord: &Coordinator) -> Result<(), Error> {
        let counter = keys::agent(self.round, ADMISSIONS);
        let made = store
            .add(&counter, 0)
            .map_err(|e| store_err("add", &counter, e))?;
        let made = u64::try_from(made).unwrap_or(0);
        while self.seen < made {
            let (g, n, host) = read_admission(store, self.round, self.seen + 1)?;
            self.seen += 1;
            self.place(coord, g, n, &host);
        }
        Ok(())
    }

    fn place(&mut self, coord: &Coordinator, g: u32, workers: u32, host: &str) {
        self.list.push((g, workers));
        coord.add_member(self.round, g);
        let ranks = self.ranks_of(g).expect("just placed");
        eprintln!(
            "phalanx launch: node {g} ({host}) joins round {} without a restart \
             (--fault-tolerance): ranks {ranks:?}; its workers take their state from the \
             running ones",
            self.round
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use phalanx_store::HashStore;

    use super::*;

    fn claim(nproc: u32, min: u32, max: u32, host: &str) -> Claim {
        Claim {
            nproc,
            nnodes: max,
            min_nnodes: min,
            nonce: host.into(),
            host: host.into(),
            program: "train".into(),
        }
    }

    fn coordinator(store: Arc<HashStore>, g: u32, members: Vec<u32>) -> Coordinator {
        let c = Coordinator::new(
            store,
            3,
            g,
            format!("h{g}"),
            Duration::from_secs(5),
            Duration::from_millis(10),
        );
        c.set_members(members);
        c
    }

    /// Node `g` (its claim `c`) asks into round 4 from another thread, after the arrivals
    /// before it; node 0 answers once the request is in.
    fn ask(
        store: &Arc<HashStore>,
        g: u32,
        c: Claim,
        ticket: i64,
    ) -> std::thread::JoinHandle<Result<Admitted, String>> {
        let s = store.clone();
        let asking = std::thread::spawn(move || {
            let request = Request {
                round: 4,
                group_rank: g,
                claim: &c,
                first: &[(0, 2), (2, 1)],
            };
            let mut never = || Ok(false);
            match arrive(
                &*s,
                &request,
                Duration::from_secs(5),
                &mut never,
                &mut || false,
            ) {
                Ok(Arrival::Admitted(a)) => Ok(a),
                Ok(_) => panic!("neither admitted nor refused"),
                Err(e) => Err(e.to_string()),
            }
        });
        while store.add(&keys::agent(4, ARRIVALS), 0).unwrap() < ticket {
            std::thread::sleep(Duration::from_millis(5));
        }
        asking
    }

    #[test]
    fn an_arriving_node_gets_ranks_after_the_rounds_and_every_agent_learns_it() {
        let store = Arc::new(HashStore::default());
        let (c0, c2) = (
            coordinator(store.clone(), 0, vec![0, 2]),
            coordinator(store.clone(), 2, vec![0, 2]),
        );
        let mut n0 = Nodes::new(4, vec![(0, 2), (2, 1)], 0);
        let mut n2 = Nodes::new(4, vec![(0, 2), (2, 1)], 0);
        let rules = Nnodes { min: 2, max: 3 };
        let mine = claim(2, 2, 3, "h0");
        // A node with another range: refused by name.
        let wrong = ask(&store, 1, claim(1, 1, 3, "odd"), 1);
        n0.admit_arrivals(&*store, &c0, rules, &mine).unwrap();
        let e = wrong.join().unwrap().unwrap_err();
        assert!(
            e.contains("node 1") && e.contains("1:3") && e.contains("2:3"),
            "{e}"
        );
        // Node 1, started right: ranks 3.. (after the round's 3), on every agent.
        let good = ask(&store, 1, claim(2, 2, 3, "h1"), 2);
        n0.admit_arrivals(&*store, &c0, rules, &mine).unwrap();
        let a = good.join().unwrap().unwrap();
        assert_eq!(a.nodes, vec![(0, 2), (2, 1), (1, 2)]);
        assert_eq!((a.live.clone(), a.first_world), (vec![0, 2, 1], 3));
        assert_eq!(n0.ranks_of(1), Some(3..5));
        n2.follow(&*store, &c2).unwrap();
        assert_eq!(n2.ranks_of(1), Some(3..5));
        assert_eq!((c0.member_count(), c2.member_count()), (3, 3));
        // Node 2 again while node 2 runs: it waits (its old heartbeat may be running out),
        // is admitted once node 2 left, with new ranks, and its timeout would name why.
        let again = ask(&store, 2, claim(1, 2, 3, "h2"), 3);
        n0.admit_arrivals(&*store, &c0, rules, &mine).unwrap();
        assert!(!store.check(&[&keys::agent(4, &answer(3))]).unwrap());
        let why = store.get(&keys::agent(4, &waiting(3))).unwrap();
        assert!(String::from_utf8_lossy(&why).contains("node rank 2 is still in round 4"));
        c0.drop_member(4, 2, 2..3);
        n0.admit_arrivals(&*store, &c0, rules, &mine).unwrap();
        let a = again.join().unwrap().unwrap();
        assert_eq!(a.nodes, vec![(0, 2), (2, 1), (1, 2), (2, 1)]);
        assert_eq!(a.live, vec![0, 1, 2]);
        assert_eq!(n0.ranks_of(2), Some(5..6));
    }

    #[test]
    fn an_arrival_that_sees_a_newer_round_joins_it() {
        let store = HashStore::default();
        let mut moved = || Ok(true);
        let got = arrive(
            &store,
            &Request {
                round: 0,
                group_rank: 1,
                claim: &claim(1, 1, 2, "h1"),
                first: &[(0, 1)],
            },
            Duration::from_secs(5),
            &mut moved,
            &mut || false,
        )
        .unwrap();
        assert!(matches!(got, Arrival::Moved));
    }
}
