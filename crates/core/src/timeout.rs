//! The one timeout model shared by the store, rendezvous and collectives.
//!
//! `PHALANX_TIMEOUT` (default 300 s, like PyTorch's store and process-group default) bounds how
//! long any single wait may make *no progress*: a 10 GiB allreduce that keeps moving bytes never
//! times out, a peer that stops answering does after the timeout.

use std::time::{Duration, Instant};

use crate::{env, Error, Result};

/// Default for `PHALANX_TIMEOUT`: 300 s, PyTorch's default store and collective timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Parses `300`, `300s`, `5m`, `1h`, `250ms` or `1.5s`; a bare number means seconds.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let t = text.trim();
    let err = |reason: &str| Error::Parse {
        what: "duration",
        value: text.to_string(),
        reason: reason.to_string(),
    };
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| err("expected a number with an optional unit ms, s, m or h"))?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(err("unknown unit; use ms, s, m or h")),
    };
    let secs = value * scale;
    // Below 1 ns it would round to a zero timeout: every wait failing at once.
    if !secs.is_finite() || !(1e-9..=1e9).contains(&secs) {
        return Err(err("must be between 1 ns and 1e9 s"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A progress deadline: `remaining()` counts down from the last `progress()`.
#[derive(Debug, Clone, Copy)]
pub struct Timeout {
    limit: Duration,
    last_progress: Instant,
}

impl Timeout {
    /// A deadline of `limit` from now.
    pub fn new(limit: Duration) -> Self {
        Timeout {
            limit,
            last_progress: Instant::now(),
        }
    }

    /// The deadline configured by `PHALANX_TIMEOUT`, or [`DEFAULT_TIMEOUT`].
    pub fn from_env() -> Result<Duration> {
        match env::get(env::PHALANX_TIMEOUT) {
            Some(v) => parse_duration(&v).map_err(|e| Error::InvalidEnv {
                name: env::PHALANX_TIMEOUT.name.into(),
                value: v,
                reason: e.to_string(),
            }),
            None => Ok(DEFAULT_TIMEOUT),
        }
    }

    /// Records progress: the countdown starts again.
    pub fn progress(&mut self) {
        self.last_progress = Instant::now();
    }

    /// Time left before the deadline, `None` once it has passed.
    pub fn remaining(&self) -> Option<Duration> {
        self.limit.checked_sub(self.last_progress.elapsed())
    }

    /// The configured limit.
    pub fn limit(&self) -> Duration {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        for bad in ["", "s", "-1", "0", "5x", "inf"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
