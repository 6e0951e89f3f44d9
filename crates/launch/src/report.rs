//! Building the failure report: each worker's reason (what its process group published to the
//! store as `error/<rank>`, its TORCHELASTIC_ERROR_FILE, or its last line), the other nodes'
//! rows, and the printed summary.

use std::collections::BTreeMap;
use std::path::Path;

use phalanx_store::keys;

use crate::diagnosis::{diagnose, RankView, Seen};
use crate::elastic::coordinate::Coordinator;
use crate::summary::{render, RootCause, Row};
use crate::worker::Worker;

/// Longest reason shown.
const MAX_REASON: usize = 300;

/// The failure report of one node's agent: what it knows locally, and what it reads and
/// exchanges through its [`Coordinator`].
pub(crate) struct Reporter<'a> {
    pub(crate) coord: &'a Coordinator,
    pub(crate) run_id: &'a str,
}

impl Reporter<'_> {
    /// Fills in the root cause's last line now that its output has been drained (it raced
    /// with the exit at detection time).
    pub(crate) fn refresh(&self, mut cause: RootCause, workers: &[Worker]) -> RootCause {
        if cause.group_rank == self.coord.node_rank {
            if let Some(w) = workers.iter().find(|w| Some(w.rank) == cause.rank) {
                cause.last_line = w.last_line().or(cause.last_line);
            }
        }
        cause
    }

    /// Prints the report for round `round` on stderr: root cause first, then the hang
    /// diagnosis when there is one (`seen`: the local workers at detection time), then every
    /// worker.
    pub(crate) fn report(
        &self,
        round: u32,
        cause: &RootCause,
        workers: &[Worker],
        seen: &BTreeMap<u32, Seen>,
    ) {
        let mut rows: Vec<Row> = workers
            .iter()
            .map(|w| Row {
                rank: w.rank,
                local_rank: w.local_rank,
                group_rank: self.coord.node_rank,
                host: self.coord.host.clone(),
                pid: w.pid,
                status: w.exit.map_or("still running".into(), |(e, _)| e.describe()),
                stopped: w.stopped_by_agent,
                error: self
                    .reason(round, w.rank, w.error_file.as_deref())
                    .or_else(|| w.last_line()),
            })
            .collect();
        let mut missing = Vec::new();
        self.coord.gather_rows(round, &mut rows, &mut missing);
        let cause_reason = cause.rank.and_then(|r| {
            let file = workers
                .iter()
                .find(|w| Some(w.rank) == cause.rank && cause.group_rank == self.coord.node_rank)
                .and_then(|w| w.error_file.as_deref());
            self.reason(round, r, file)
        });
        let diagnosis = diagnose(&self.rank_views(round, &rows, workers, seen));
        let mut text = render(
            self.run_id,
            round,
            cause,
            cause_reason.as_deref(),
            diagnosis.as_deref(),
            &rows,
        );
        for g in missing {
            text.push_str(&format!("  (node {g} sent no report in time)\n"));
        }
        eprint!("{text}");
    }

    /// Every rank's published `status/<rank>`, process state and last line, for the diagnosis.
    fn rank_views(
        &self,
        round: u32,
        rows: &[Row],
        workers: &[Worker],
        seen: &BTreeMap<u32, Seen>,
    ) -> Vec<RankView> {
        rows.iter()
            .map(|r| {
                let local = r.group_rank == self.coord.node_rank;
                let worker = workers.iter().find(|w| local && w.rank == r.rank);
                RankView {
                    rank: r.rank,
                    status: self.published(&keys::in_round(round, &keys::status(r.rank))),
                    state: seen.get(&r.rank).filter(|_| local).and_then(|s| s.state),
                    last_line: worker
                        .and_then(Worker::last_line)
                        .or_else(|| r.error.clone()),
                }
            })
            .collect()
    }

    /// The first line of store key `k`, if it is there (and the store still answers).
    fn published(&self, k: &str) -> Option<String> {
        self.coord
            .read(k)
            .map(|v| first_line(&String::from_utf8_lossy(&v)))
    }

    /// Why rank `rank` failed, in its own words: the store's `error/<rank>` (published by its
    /// process group, under the round's prefix or bare), else its error file.
    fn reason(&self, round: u32, rank: u32, error_file: Option<&Path>) -> Option<String> {
        [keys::in_round(round, &keys::error(rank)), keys::error(rank)]
            .iter()
            .find_map(|k| self.published(k))
            .or_else(|| error_file.and_then(read_error_file))
    }
}

fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .chars()
        .take(MAX_REASON)
        .collect()
}

/// The message of a torchelastic error file: `{"message": {"message": "..."}}` or
/// `{"message": "..."}`.
fn read_error_file(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let m = &v["message"];
    let msg = m["message"].as_str().or_else(|| m.as_str())?;
    Some(first_line(msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_file_forms() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("error.json");
        std::fs::write(
            &p,
            r#"{"message": {"message": "RuntimeError: boom\nmore", "extraInfo": {}}}"#,
        )
        .unwrap();
        assert_eq!(read_error_file(&p).as_deref(), Some("RuntimeError: boom"));
        std::fs::write(&p, r#"{"message": "plain"}"#).unwrap();
        assert_eq!(read_error_file(&p).as_deref(), Some("plain"));
        std::fs::write(&p, "not json").unwrap();
        assert_eq!(read_error_file(&p), None);
        assert_eq!(read_error_file(&dir.path().join("missing")), None);
    }
}
