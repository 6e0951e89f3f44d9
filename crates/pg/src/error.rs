//! The error type of `phalanx-pg`.

/// Errors of process-group setup and collectives.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A launcher or scheduler variable is missing or malformed.
    #[error("environment variable {name}={value:?}: {reason}")]
    Env {
        /// Variable name.
        name: String,
        /// Its value (empty when missing).
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// Shared configuration (timeouts, dtypes) was invalid.
    #[error(transparent)]
    Config(#[from] phalanx_core::Error),
    /// The rendezvous store failed.
    #[error("rank {rank}: rendezvous store: {source}")]
    Store {
        /// This rank.
        rank: usize,
        /// The store error.
        source: phalanx_store::Error,
    },
    /// Some ranks never joined the rank-level rendezvous.
    #[error("rank {rank}: {} did not publish their address within {waited_s:.1} s (not started, crashed, or a different MASTER_ADDR/PORT)", ranks_text(.missing))]
    RendezvousIncomplete {
        /// This rank.
        rank: usize,
        /// The ranks missing.
        missing: Vec<usize>,
        /// How long this rank waited.
        waited_s: f64,
    },
    /// Mesh setup failed.
    #[error("rank {rank}: setting up the transport: {source}")]
    Setup {
        /// This rank.
        rank: usize,
        /// The transport error.
        source: phalanx_transport::Error,
    },
    /// A backend is not in this build, or could not start (`backend` names it).
    #[error("backend {backend}: {reason}")]
    Backend {
        /// `native` or `mpi`.
        backend: &'static str,
        /// What is missing or went wrong.
        reason: String,
    },
    /// A collective failed; `cause` names the root cause (which rank, what it said).
    #[error("rank {rank}: {op} failed: {cause}")]
    Collective {
        /// This rank.
        rank: usize,
        /// The collective (`allreduce #12 sum f32 count=1024`).
        op: String,
        /// Root cause.
        cause: String,
    },
    /// An earlier failure (here or on another rank) broke the group.
    #[error("rank {rank}: the process group has failed: {cause}")]
    Failed {
        /// This rank.
        rank: usize,
        /// Root cause of the first failure.
        cause: String,
    },
    /// Fault tolerance: this rank's group failed and no replacement generation began within
    /// `PHALANX_TIMEOUT` (Note [FT generations]).
    #[error("rank {rank}: the process group failed and no replacement joined within {waited_s:.1} s (generation {generation}; a whole node lost, or no restart left): {cause}")]
    Regroup {
        /// This rank.
        rank: usize,
        /// The generation it was in.
        generation: u64,
        /// How long it waited for a new one.
        waited_s: f64,
        /// The failure that broke the group.
        cause: String,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `ranks [3, 7-9, 12, 13]`: runs of three or more consecutive ranks joined, and at most 16
/// items shown, so that a rendezvous missing thousands of ranks still fits on a line.
fn ranks_text(ranks: &[usize]) -> String {
    const SHOWN: usize = 16;
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &r in ranks {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == r => *end = r,
            _ => runs.push((r, r)),
        }
    }
    // A run of two reads better as two ranks.
    let items: Vec<String> = runs
        .iter()
        .flat_map(|&(a, b)| match b - a {
            0 => vec![a.to_string()],
            1 => vec![a.to_string(), b.to_string()],
            _ => vec![format!("{a}-{b}")],
        })
        .collect();
    let text: Vec<&str> = items.iter().take(SHOWN).map(String::as_str).collect();
    let more = match items.len() > SHOWN {
        true => format!(", … ({} ranks in all)", ranks.len()),
        false => String::new(),
    };
    format!("ranks [{}{more}]", text.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_ranks_are_shown_as_runs_and_capped() {
        assert_eq!(ranks_text(&[3, 7, 8, 9, 12, 13]), "ranks [3, 7-9, 12, 13]");
        let many: Vec<usize> = (0..4096).filter(|r| r % 2 == 1).collect();
        let text = ranks_text(&many);
        assert!(text.starts_with("ranks [1, 3, 5,"), "{text}");
        assert!(text.ends_with(", … (2048 ranks in all)]"), "{text}");
        assert!(text.len() < 120, "{text}");
    }
}
