//! The failure report: the root cause first (the first worker to fail, by time, on any node),
//! then one row per worker with its exit and last error line.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// The failure that ended a round, as published to the other agents (first writer wins).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct RootCause {
    /// Node of the failure.
    pub(crate) group_rank: u32,
    /// Host of that node.
    pub(crate) host: String,
    /// The failed worker; `None` when the agent itself stopped the job (signal, lost store).
    pub(crate) rank: Option<u32>,
    pub(crate) local_rank: Option<u32>,
    pub(crate) pid: Option<u32>,
    /// `exit code 3`, `signal 9 (SIGKILL)`, `agent received SIGINT`, …
    pub(crate) what: String,
    /// Exit code the agents use when they give up (the worker's code, or 128 + signal).
    pub(crate) code: u8,
    /// Seconds between the round's start and the failure.
    pub(crate) after_s: f64,
    /// Within --startup-window of the round's start.
    pub(crate) startup: bool,
    /// Whether --max-restarts may restart after it (an operator's signal may not).
    pub(crate) restartable: bool,
    /// The worker's last line (stderr, else stdout).
    pub(crate) last_line: Option<String>,
}

impl RootCause {
    /// `rank 1 (local_rank 1, node 0, host h, pid 42): signal 9 (SIGKILL) 0.31 s after start`.
    pub(crate) fn headline(&self) -> String {
        match (self.rank, self.local_rank) {
            (Some(r), Some(lr)) => format!(
                "rank {r} (local_rank {lr}, node {}, host {}, pid {}): {} {:.2} s after start",
                self.group_rank,
                self.host,
                self.pid.map_or("?".into(), |p| p.to_string()),
                self.what,
                self.after_s
            ),
            _ => format!(
                "node {} (host {}): {}",
                self.group_rank, self.host, self.what
            ),
        }
    }
}

/// One worker's line in the table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Row {
    pub(crate) rank: u32,
    pub(crate) local_rank: u32,
    pub(crate) group_rank: u32,
    pub(crate) host: String,
    pub(crate) pid: u32,
    /// `exit code 1`, `signal 15 (SIGTERM)`, `still running` …
    pub(crate) status: String,
    /// The agent signalled it: its end is a consequence of the failure, not a cause.
    pub(crate) stopped: bool,
    /// Reason published to the store (`rank N failed: …`), the error file's message, or the
    /// last line of its output.
    pub(crate) error: Option<String>,
}

/// The whole report, root cause first.
pub(crate) fn render(
    run_id: &str,
    round: u32,
    cause: &RootCause,
    cause_reason: Option<&str>,
    diagnosis: Option<&str>,
    rows: &[Row],
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "phalanx launch: job failed (run id {run_id}, attempt {round})"
    );
    let _ = writeln!(s, "root cause: {}", cause.headline());
    if let Some(r) = cause_reason {
        let _ = writeln!(s, "  reason:    {r}");
    }
    if let Some(l) = &cause.last_line {
        if Some(l.as_str()) != cause_reason {
            let _ = writeln!(s, "  last line: {l}");
        }
    }
    if let Some(d) = diagnosis {
        s.push_str(d);
    }
    if rows.is_empty() {
        return s;
    }
    let mut sorted: Vec<&Row> = rows.iter().collect();
    // The root cause's row first, then the other failures, then ranks the agents stopped.
    sorted.sort_by_key(|r| (Some(r.rank) != cause.rank, r.stopped, r.rank));
    let status = |r: &Row| {
        if r.stopped {
            format!("{} (stopped by launcher)", r.status)
        } else {
            r.status.clone()
        }
    };
    let host_w = rows.iter().map(|r| r.host.len()).max().unwrap_or(4).max(4);
    let status_w = rows
        .iter()
        .map(|r| status(r).len())
        .max()
        .unwrap_or(6)
        .max(6);
    let _ = writeln!(
        s,
        "  {:>5}  {:>10}  {:>4}  {:<host_w$}  {:>7}  {:<status_w$}  error",
        "rank", "local_rank", "node", "host", "pid", "exit"
    );
    for r in sorted {
        let _ = writeln!(
            s,
            "  {:>5}  {:>10}  {:>4}  {:<host_w$}  {:>7}  {:<status_w$}  {}",
            r.rank,
            r.local_rank,
            r.group_rank,
            r.host,
            r.pid,
            status(r),
            r.error.as_deref().unwrap_or("-")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(rank: u32, status: &str, stopped: bool) -> Row {
        Row {
            rank,
            local_rank: rank,
            group_rank: 0,
            host: "h".into(),
            pid: 100 + rank,
            status: status.into(),
            stopped,
            error: None,
        }
    }

    #[test]
    fn root_cause_first() {
        let cause = RootCause {
            group_rank: 0,
            host: "h".into(),
            rank: Some(2),
            local_rank: Some(2),
            pid: Some(102),
            what: "signal 9 (SIGKILL)".into(),
            code: 137,
            after_s: 0.5,
            startup: false,
            restartable: true,
            last_line: Some("boom".into()),
        };
        let rows = [
            row(0, "signal 15 (SIGTERM)", true),
            row(1, "exit code 1", false),
            row(2, "signal 9 (SIGKILL)", false),
        ];
        let text = render("r", 0, &cause, Some("rank 2 failed: oom"), None, &rows);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("root cause: rank 2 (local_rank 2, node 0, host h, pid 102)"));
        assert!(lines[1].contains("SIGKILL"));
        assert_eq!(lines[2].trim(), "reason:    rank 2 failed: oom");
        assert_eq!(lines[3].trim(), "last line: boom");
        // Table: header, then rank 2 (cause), rank 1 (own failure), rank 0 (stopped).
        assert!(lines[4].contains("local_rank"));
        assert!(lines[5].trim().starts_with("2 "));
        assert!(lines[6].trim().starts_with("1 "));
        assert!(lines[7].trim().starts_with("0 ") && lines[7].contains("stopped by launcher"));
    }
}
