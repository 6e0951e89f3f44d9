//! The departures of lost nodes that this agent owes the generation log until one agent
//! recorded them (Note [A departure is recorded once] in `policy.rs`): each is claimed first
//! (a compare-and-set on `ft/dropped/<node>`), and a claim or a record that found no answer
//! is kept for a later tick.

use std::cell::RefCell;
use std::ops::Range;
use std::time::Instant;

use phalanx_store::{keys, Store};

/// A departure to record: (node, ranks, the generation the first rank took already).
pub(crate) type Owed = (u32, Range<u32>, Option<u64>);

/// What this agent owes, by round.
#[derive(Default)]
pub(crate) struct Departures {
    owed: RefCell<Vec<Departure>>,
}

/// A lost node whose ranks leave the process group: the change one agent records.
struct Departure {
    round: u32,
    node: u32,
    ranks: Range<u32>,
    since: Instant,
    /// `Some` once this agent won the claim (what is owed is the record), with the
    /// generation the first rank's change took whose key is not yet written.
    claimed: Option<Option<u64>>,
}

impl Departures {
    /// Owes node `node`'s `ranks` in round `round`: to claim (`claimed` `None`), or, claimed
    /// already, to record (with the generation already bumped, if any).
    pub(crate) fn owe(
        &self,
        round: u32,
        node: u32,
        ranks: Range<u32>,
        claimed: Option<Option<u64>>,
    ) {
        self.owed.borrow_mut().push(Departure {
            round,
            node,
            ranks,
            since: Instant::now(),
            claimed,
        });
    }

    /// The departures owed in round `round` that agent `me` claimed now through `ctl`, or
    /// had claimed before, to record. A claim another agent won is settled; one the store
    /// did not answer stays owed for the next tick, and says so. Those of an earlier round
    /// are dropped: its group is gone.
    pub(crate) fn claim(&self, ctl: &dyn Store, me: u32, round: u32) -> Vec<Owed> {
        let me = me.to_string();
        let mut mine = Vec::new();
        self.owed.borrow_mut().retain(|d| {
            if d.round != round {
                return false;
            }
            if let Some(bumped) = d.claimed {
                mine.push((d.node, d.ranks.clone(), bumped));
                return false;
            }
            let k = keys::agent(d.round, &format!("ft/dropped/{}", d.node));
            match ctl.compare_set(&k, b"", me.as_bytes()) {
                Ok(v) => {
                    if v == me.as_bytes() {
                        mine.push((d.node, d.ranks.clone(), None));
                    }
                    false
                }
                Err(e) => {
                    eprintln!(
                        "phalanx launch: node {}'s ranks {:?} have left, but claiming their \
                         departure found no answer from the store ({e}); trying again at the \
                         next tick ({:.1} s since it left)",
                        d.node,
                        d.ranks,
                        d.since.elapsed().as_secs_f64()
                    );
                    true
                }
            }
        });
        mine
    }
}
