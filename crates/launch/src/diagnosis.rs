//! Hang diagnosis: which rank the others wait for, and what it is doing.
//!
//! When a collective times out, each rank publishes `status/<rank>` (see Note [Hang diagnosis]
//! in phalanx-pg's `progress.rs`): `waiting in <collective> for rank(s) [..]; last completed
//! #N`. A rank that is stopped (SIGSTOP, a debugger), stuck in the kernel or busy outside the
//! collectives publishes nothing. At the moment the agent sees the failure, before it stops
//! anything, it reads the `/proc/<pid>/stat` state of its workers' processes; the report then
//! names the rank the others wait for that is not itself waiting, with its state and its last
//! output line — the culprit, found in seconds rather than after a 30-minute timeout.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::worker::Worker;

/// What the agent saw of one local worker when the failure was detected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The most telling `/proc` state among the worker's processes (`T`, `D`, `R`, `S`, …);
    /// `None` when it had already exited.
    pub(crate) state: Option<char>,
}

/// Note [Stopped workers]
/// A worker stopped by SIGSTOP (or job control) fails nothing: its peers wait in a collective
/// until their own timeout, and PyTorch's Gloo waits 30 minutes. The agent watches its workers'
/// `/proc` states every `--monitor-interval`, and one seen stopped (state `T`) for
/// PHALANX_TIMEOUT ends the round, named as the root cause. phalanx's own ranks time out in
/// their collective at about the same moment; their statuses still feed the hang diagnosis
/// printed under it. A worker under a debugger (state `t`) is left alone: a person is there.
pub(crate) struct StoppedWatch {
    /// When each local worker was first seen stopped, in this stretch.
    since: Vec<Option<Instant>>,
    /// The previous check.
    last: Option<Instant>,
}

/// A gap this long between two checks means the agent itself was stopped (a Slurm suspend,
/// job control): its workers' stops during that time are not theirs to answer for.
const AGENT_GAP: Duration = Duration::from_secs(2);

impl StoppedWatch {
    pub(crate) fn new(workers: usize) -> StoppedWatch {
        StoppedWatch {
            since: vec![None; workers],
            last: None,
        }
    }

    /// The first local rank stopped for `limit` or longer, with how long it has been stopped.
    pub(crate) fn check(&mut self, workers: &[Worker], limit: Duration) -> Option<(u32, Duration)> {
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) > AGENT_GAP) {
            self.since.iter_mut().for_each(|s| *s = None);
        }
        self.last = Some(now);
        for (lr, w) in workers.iter().enumerate() {
            let stopped = w.exit.is_none() && proc_state(w.pid) == Some('T');
            let since = &mut self.since[lr];
            match (stopped, *since) {
                (false, _) => *since = None,
                (true, None) => *since = Some(now),
                (true, Some(t)) if now.duration_since(t) >= limit => {
                    return Some((lr as u32, now.duration_since(t)))
                }
                (true, Some(_)) => {}
            }
        }
        None
    }
}

/// Snapshot of the local workers' process states, by rank, taken before they are stopped.
pub(crate) fn snapshot(workers: &[Worker]) -> BTreeMap<u32, Seen> {
    let groups = group_states();
    workers
        .iter()
        .map(|w| {
            let state = if w.exit.is_some() {
                None
            } else {
                let own = proc_state(w.pid);
                let group = groups.get(&w.pid).and_then(|s| most_telling(s));
                match (own, group) {
                    (Some(o), Some(g)) if rank_of(g) < rank_of(o) => Some(g),
                    (o, g) => o.or(g),
                }
            };
            (w.rank, Seen { state })
        })
        .collect()
}

/// Everything the report knows about one rank.
#[derive(Clone, Debug, Default)]
pub(crate) struct RankView {
    pub(crate) rank: u32,
    /// `status/<rank>` as published by its process group.
    pub(crate) status: Option<String>,
    /// Process state at detection time (local workers only).
    pub(crate) state: Option<char>,
    /// Its last output line (local) or the reason its node reported.
    pub(crate) last_line: Option<String>,
}

/// A parsed `status/<rank>`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Status {
    Waiting {
        during: String,
        on: Vec<u32>,
        last: String,
    },
    Other(String),
}

fn parse(text: &str) -> Status {
    let waiting = || -> Option<Status> {
        let rest = text.strip_prefix("waiting in ")?;
        let (during, rest) = rest.split_once(" for rank(s) [")?;
        let (list, rest) = rest.split_once(']')?;
        let on = list
            .split(',')
            .map(|r| r.trim().parse().ok())
            .collect::<Option<Vec<u32>>>()?;
        let last = rest.trim_start_matches(';').trim().to_string();
        Some(Status::Waiting {
            during: during.to_string(),
            on,
            last,
        })
    };
    waiting().unwrap_or_else(|| Status::Other(text.to_string()))
}

/// The diagnosis block, or `None` when there is nothing to diagnose (no rank timed out and no
/// worker was stopped or stuck).
pub(crate) fn diagnose(views: &[RankView]) -> Option<String> {
    let parsed: BTreeMap<u32, Status> = views
        .iter()
        .filter_map(|v| Some((v.rank, parse(v.status.as_deref()?))))
        .collect();
    let waiting = |r: u32| matches!(parsed.get(&r), Some(Status::Waiting { .. }));
    // Waiters grouped by what they wait in and for whom.
    let mut groups: BTreeMap<(String, Vec<u32>, String), Vec<u32>> = BTreeMap::new();
    let mut waited: BTreeSet<u32> = BTreeSet::new();
    for (&r, s) in &parsed {
        if let Status::Waiting { during, on, last } = s {
            waited.extend(on.iter().copied());
            groups
                .entry((during.clone(), on.clone(), last.clone()))
                .or_default()
                .push(r);
        }
    }
    let view = |r: u32| views.iter().find(|v| v.rank == r);
    let culprits: Vec<u32> = waited.iter().copied().filter(|&r| !waiting(r)).collect();
    let odd: Vec<u32> = views
        .iter()
        .filter(|v| matches!(v.state, Some('T' | 't' | 'D')) && !culprits.contains(&v.rank))
        .map(|v| v.rank)
        .collect();
    if groups.is_empty() && odd.is_empty() {
        return None;
    }
    let mut s = String::new();
    let headline = match culprits.as_slice() {
        [] if !groups.is_empty() => "every rank waited for is itself waiting (a cycle: \
             point-to-point calls in a different order on different ranks?)"
            .to_string(),
        [] => format!("{} stopped or stuck", ranks(&odd)),
        cs => format!(
            "{} {} what the others wait for",
            ranks(cs),
            if cs.len() == 1 { "is" } else { "are" }
        ),
    };
    let _ = writeln!(s, "hang diagnosis: {headline}");
    for ((during, on, last), who) in &groups {
        let _ = writeln!(
            s,
            "  {} {} in {during} for {}; {last}",
            ranks(who),
            if who.len() == 1 { "waits" } else { "wait" },
            ranks(on)
        );
    }
    for &r in culprits.iter().chain(odd.iter()) {
        let v = view(r);
        let state = v.and_then(|v| v.state);
        let mut line = format!("  rank {r} {}", describe_state(state, v.is_some()));
        let waited_in: BTreeSet<&str> = groups
            .keys()
            .filter(|(_, on, _)| on.contains(&r))
            .map(|(d, _, _)| d.as_str())
            .collect();
        for d in waited_in {
            let _ = write!(line, "; it has not delivered its part of {d}");
        }
        match parsed.get(&r) {
            Some(Status::Other(t)) => {
                let _ = write!(line, "; it reported: {t}");
            }
            Some(Status::Waiting { .. }) => {}
            None => line.push_str("; it published no status"),
        }
        let _ = writeln!(s, "{line}");
        if let Some(l) = v.and_then(|v| v.last_line.as_deref()) {
            let _ = writeln!(s, "    its last output line: {l}");
        }
    }
    Some(s)
}

fn describe_state(state: Option<char>, known: bool) -> String {
    match state {
        Some('T') => "is stopped (state T: SIGSTOP, job control or a debugger)".into(),
        Some('t') => "is stopped by a tracer (state t: a debugger)".into(),
        Some('D') => {
            "is in uninterruptible sleep (state D: disk or network file system I/O)".into()
        }
        Some('R') => "is running outside the collectives (state R: computing, or looping \
             before its next collective)"
            .into(),
        Some('S') => "is sleeping outside the collectives (state S: blocked on I/O, a lock \
             or a child)"
            .into(),
        Some('Z') => "had exited (zombie)".into(),
        Some(c) => format!("is in state {c}"),
        None if known => "had already exited or runs on another node".into(),
        None => "is not known to this node".into(),
    }
}

/// `rank 1` or `ranks 0, 2`.
fn ranks(rs: &[u32]) -> String {
    let list: Vec<String> = rs.iter().map(u32::to_string).collect();
    match rs.len() {
        1 => format!("rank {}", list[0]),
        _ => format!("ranks {}", list.join(", ")),
    }
}

/// How telling a state is (lower: more): stopped and stuck beat running beat sleeping.
fn rank_of(c: char) -> u8 {
    match c {
        'T' | 't' => 0,
        'D' => 1,
        'R' => 2,
        'S' => 3,
        _ => 4,
    }
}

fn most_telling(states: &[char]) -> Option<char> {
    states.iter().copied().min_by_key(|&c| rank_of(c))
}

/// `(state, process group)` from `/proc/<pid>/stat` text: fields 3 and 5, after the
/// parenthesised command name (which may itself hold spaces and parentheses).
fn parse_stat(text: &str) -> Option<(char, u32)> {
    let rest = text.rsplit_once(')')?.1;
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let _ppid = f.next()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, pgrp))
}

fn proc_state(pid: u32) -> Option<char> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text).map(|(s, _)| s)
}

/// States of every process, by process group (a worker leads its own group).
fn group_states() -> BTreeMap<u32, Vec<char>> {
    let mut out: BTreeMap<u32, Vec<char>> = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(e.path().join("stat")) {
            if let Some((state, pgrp)) = parse_stat(&text) {
                out.entry(pgrp).or_default().push(state);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(rank: u32, status: Option<&str>, state: Option<char>) -> RankView {
        RankView {
            rank,
            status: status.map(str::to_string),
            state,
            last_line: Some(format!("line of {rank}")),
        }
    }

    #[test]
    fn names_the_stopped_rank_the_others_wait_for() {
        let w =
            "waiting in allreduce #1580 sum f32 count=16384 for rank(s) [1]; last completed #1579";
        let views = [
            view(0, Some(w), None),
            view(1, None, Some('T')),
            view(2, Some(w), Some('R')),
        ];
        let text = diagnose(&views).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "hang diagnosis: rank 1 is what the others wait for"
        );
        assert_eq!(
            lines[1],
            "  ranks 0, 2 wait in allreduce #1580 sum f32 count=16384 for rank 1; last completed #1579"
        );
        assert!(
            lines[2].starts_with("  rank 1 is stopped (state T"),
            "{text}"
        );
        assert!(lines[2].contains("not delivered its part of allreduce #1580"));
        assert!(lines[2].ends_with("it published no status"));
        assert_eq!(lines[3], "    its last output line: line of 1");
    }

    #[test]
    fn follows_chains_and_reports_cycles() {
        // 0 waits for 2, 2 waits for 1, 1 is busy computing: rank 1 is the culprit.
        let views = [
            view(
                0,
                Some("waiting in barrier #3 for rank(s) [2]; last completed #2"),
                None,
            ),
            view(1, None, Some('R')),
            view(
                2,
                Some("waiting in barrier #3 for rank(s) [1]; last completed #2"),
                None,
            ),
        ];
        let text = diagnose(&views).unwrap();
        assert!(text.starts_with("hang diagnosis: rank 1 is what"), "{text}");
        assert!(text.contains("rank 1 is running outside the collectives"));
        // 0 and 1 wait for each other.
        let views = [
            view(
                0,
                Some("waiting in recv #3 for rank(s) [1]; last completed #2"),
                None,
            ),
            view(
                1,
                Some("waiting in recv #3 for rank(s) [0]; last completed #2"),
                None,
            ),
        ];
        assert!(diagnose(&views).unwrap().contains("a cycle"));
    }

    #[test]
    fn nothing_to_say_without_waiters_or_stopped_workers() {
        let views = [
            view(0, Some("failed in allreduce #4; last completed #3"), None),
            view(1, None, Some('S')),
        ];
        assert_eq!(diagnose(&views), None);
        let views = [view(0, None, Some('D')), view(1, None, None)];
        let text = diagnose(&views).unwrap();
        assert!(
            text.starts_with("hang diagnosis: rank 0 stopped or stuck"),
            "{text}"
        );
    }

    #[test]
    fn parses_stat_lines_and_statuses() {
        let stat = "4242 (a b) c) T 1 4240 4240 0 -1";
        assert_eq!(parse_stat(stat), Some(('T', 4240)));
        assert_eq!(parse_stat("garbage"), None);
        assert!(proc_state(std::process::id()).is_some());
        assert_eq!(
            parse("waiting in x #1 for rank(s) [1, 3]; last completed #0"),
            Status::Waiting {
                during: "x #1".into(),
                on: vec![1, 3],
                last: "last completed #0".into()
            }
        );
        assert!(matches!(
            parse("waiting in x for rank(s) [a]"),
            Status::Other(_)
        ));
    }
}
