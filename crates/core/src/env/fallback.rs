//! Settings that more than one variable can decide: phalanx's own first, then the ones a
//! PyTorch user's cluster profile already sets.
//!
//! Note [Borrowed variables]: a PyTorch user's profile says `export NCCL_SOCKET_IFNAME=eth1`
//! and `export NCCL_DEBUG=INFO` (or `GLOO_SOCKET_IFNAME`, `TORCH_DISTRIBUTED_DEBUG`). PyTorch's
//! backends honour them, so phalanx does too, on every path that picks an interface or a log
//! level (`init_process_group`, the NCCL backend, `phalanx doctor`, `phalanx store`, the
//! `phalanx_torch` backend), through the two functions here:
//!
//! | setting | read in this order |
//! |---|---|
//! | interface ([`socket_ifname`]) | `PHALANX_SOCKET_IFNAME`, `GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME` |
//! | log level ([`log_level`]) | `PHALANX_DEBUG`, `NCCL_DEBUG`, `TORCH_DISTRIBUTED_DEBUG` |
//!
//! The first variable that is set (non-empty) decides, with its own meaning: Gloo's
//! `GLOO_SOCKET_IFNAME` is a comma list of exact interface names, `PHALANX_SOCKET_IFNAME` and
//! `NCCL_SOCKET_IFNAME` use NCCL's syntax (prefixes, `^` to exclude, `=` for exact names). A
//! value that cannot be used is reported with the variable that held it, never with
//! `PHALANX_*` when another one decided; and a bad value of the deciding variable is an error,
//! not a reason to read the next one (the user meant that variable).
//!
//! The other direction, phalanx's settings onto an unset `NCCL_*` variable for the NCCL
//! backend, goes through the same functions (Note [NCCL variables] in phalanx-pg), so both
//! backends of a job pick the same interface.
//!
//! ```
//! use phalanx_core::env::{log_level_in, socket_ifname_in, LogLevel};
//! let profile = |k: &str| match k {
//!     "NCCL_DEBUG" => Some("INFO".to_string()),
//!     "GLOO_SOCKET_IFNAME" => Some("eth1,eth2".to_string()),
//!     _ => None,
//! };
//! let ifname = socket_ifname_in(&profile).unwrap();
//! assert_eq!(ifname.origin.to_string(), "GLOO_SOCKET_IFNAME=eth1,eth2");
//! assert_eq!(ifname.nccl_spec(), "=eth1,eth2"); // Gloo's names are exact
//! let level = log_level_in(&profile).unwrap();
//! assert_eq!(level.level, LogLevel::Info);
//! assert_eq!(level.origin.unwrap().var, "NCCL_DEBUG");
//! ```

use std::fmt;

use super::vars::{
    EnvVar, GLOO_SOCKET_IFNAME, NCCL_DEBUG, NCCL_SOCKET_IFNAME, PHALANX_DEBUG,
    PHALANX_SOCKET_IFNAME, TORCH_DISTRIBUTED_DEBUG,
};
use crate::{Error, Result};

/// The variable that decided a setting and the value it held (`NCCL_SOCKET_IFNAME=eth1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The variable's name.
    pub var: &'static str,
    /// Its value, as the user wrote it.
    pub value: String,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.var, self.value)
    }
}

/// The variables that choose the interface, in precedence order.
pub const SOCKET_IFNAME_VARS: [EnvVar; 3] = [
    PHALANX_SOCKET_IFNAME,
    GLOO_SOCKET_IFNAME,
    NCCL_SOCKET_IFNAME,
];

/// The variables that choose the log level, in precedence order.
pub const DEBUG_VARS: [EnvVar; 3] = [PHALANX_DEBUG, NCCL_DEBUG, TORCH_DISTRIBUTED_DEBUG];

/// Which interface(s) to listen on, as the deciding variable said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketIfname {
    /// The variable and its value.
    pub origin: Origin,
}

impl SocketIfname {
    /// A spec in NCCL's syntax given as `PHALANX_SOCKET_IFNAME` (a caller that has the spec
    /// but not the variable, e.g. a test or an explicit option).
    pub fn phalanx(spec: &str) -> SocketIfname {
        SocketIfname {
            origin: Origin {
                var: PHALANX_SOCKET_IFNAME.name,
                value: spec.to_string(),
            },
        }
    }

    /// The same choice in NCCL's syntax, which the interface filter of phalanx-transport and
    /// NCCL itself read: Gloo's exact names become `=name,name`, the others are already in it.
    pub fn nccl_spec(&self) -> String {
        if self.origin.var == GLOO_SOCKET_IFNAME.name {
            let names: Vec<&str> = self
                .origin
                .value
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .collect();
            format!("={}", names.join(","))
        } else {
            self.origin.value.clone()
        }
    }

    /// How the variable's value is read, for messages: NCCL's syntax or Gloo's exact names.
    pub fn syntax(&self) -> &'static str {
        SocketIfname::syntax_of(self.origin.var)
    }

    /// [`SocketIfname::syntax`] of the variable named `var`.
    pub fn syntax_of(var: &str) -> &'static str {
        if var == GLOO_SOCKET_IFNAME.name {
            "Gloo's syntax: exact names"
        } else {
            "NCCL's syntax: prefixes, ^ excludes, = exact"
        }
    }
}

/// The interface setting from the process environment; `None` when no variable is set (then
/// the interface that routes to `MASTER_ADDR` is used).
pub fn socket_ifname() -> Option<SocketIfname> {
    socket_ifname_in(&lookup)
}

/// [`socket_ifname`] from any lookup (tests, a child's environment); a lookup returns `None`
/// for an unset variable, and an empty value counts as unset.
pub fn socket_ifname_in(get: &dyn Fn(&str) -> Option<String>) -> Option<SocketIfname> {
    first_set(&SOCKET_IFNAME_VARS, get).map(|origin| SocketIfname { origin })
}

/// phalanx's log levels, least to most verbose (tracing's levels; the documented ones are
/// WARN, INFO and TRACE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings (the default).
    Warn,
    /// Per rank: interface, addresses, transports, algorithms.
    Info,
    /// Also store connections and retries.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The directive of a `tracing_subscriber::EnvFilter`: `warn`, `info`, ….
    pub fn filter(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }

    /// The `NCCL_DEBUG` value that logs as much (NCCL has no ERROR or DEBUG level).
    pub fn nccl(self) -> &'static str {
        match self {
            LogLevel::Error | LogLevel::Warn => "WARN",
            LogLevel::Info | LogLevel::Debug => "INFO",
            LogLevel::Trace => "TRACE",
        }
    }

    /// The name as `PHALANX_DEBUG` spells it.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Error => "ERROR",
            LogLevel::Warn => "WARN",
            LogLevel::Info => "INFO",
            LogLevel::Debug => "DEBUG",
            LogLevel::Trace => "TRACE",
        }
    }
}

/// The log level and the variable that decided it (`None`: nothing set, WARN).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSetting {
    /// The level to log at.
    pub level: LogLevel,
    /// The variable and its value, when one was set.
    pub origin: Option<Origin>,
}

/// The log level from the process environment.
///
/// # Errors
///
/// [`Error::InvalidEnv`] naming the deciding variable when its value is not one of its
/// levels; callers warn and log at WARN.
pub fn log_level() -> Result<LogSetting> {
    log_level_in(&lookup)
}

/// [`log_level`] from any lookup. The mapping onto phalanx's levels (case-insensitive):
///
/// | variable | values |
/// |---|---|
/// | `PHALANX_DEBUG` | `ERROR`, `WARN`, `INFO`, `DEBUG`, `TRACE` |
/// | `NCCL_DEBUG` | `VERSION`, `WARN` → WARN; `INFO`, `ABORT` → INFO; `TRACE` → TRACE |
/// | `TORCH_DISTRIBUTED_DEBUG` | `OFF` → WARN; `INFO` → INFO; `DETAIL` → TRACE |
///
/// NCCL's VERSION prints only its version banner, so it asks for no more than warnings;
/// ABORT is NCCL's INFO plus aborting on a warning. PyTorch's DETAIL adds per-collective
/// checks and logs, phalanx's most verbose level.
///
/// # Errors
///
/// As [`log_level`].
pub fn log_level_in(get: &dyn Fn(&str) -> Option<String>) -> Result<LogSetting> {
    let Some(origin) = first_set(&DEBUG_VARS, get) else {
        return Ok(LogSetting {
            level: LogLevel::Warn,
            origin: None,
        });
    };
    let v = origin.value.trim().to_ascii_uppercase();
    let (level, accepted) = match origin.var {
        "NCCL_DEBUG" => (
            match v.as_str() {
                "VERSION" | "WARN" => Some(LogLevel::Warn),
                "INFO" | "ABORT" => Some(LogLevel::Info),
                "TRACE" => Some(LogLevel::Trace),
                _ => None,
            },
            "VERSION, WARN, INFO, ABORT, TRACE",
        ),
        "TORCH_DISTRIBUTED_DEBUG" => (
            match v.as_str() {
                "OFF" => Some(LogLevel::Warn),
                "INFO" => Some(LogLevel::Info),
                "DETAIL" => Some(LogLevel::Trace),
                _ => None,
            },
            "OFF, INFO, DETAIL",
        ),
        _ => (
            match v.as_str() {
                "ERROR" => Some(LogLevel::Error),
                "WARN" => Some(LogLevel::Warn),
                "INFO" => Some(LogLevel::Info),
                "DEBUG" => Some(LogLevel::Debug),
                "TRACE" => Some(LogLevel::Trace),
                _ => None,
            },
            "ERROR, WARN, INFO, DEBUG, TRACE",
        ),
    };
    match level {
        Some(level) => Ok(LogSetting {
            level,
            origin: Some(origin),
        }),
        None => Err(Error::InvalidEnv {
            name: origin.var.to_string(),
            value: origin.value,
            reason: format!("not a log level (accepted: {accepted})"),
        }),
    }
}

/// The first of `vars` that `get` finds set and non-empty.
fn first_set(vars: &[EnvVar], get: &dyn Fn(&str) -> Option<String>) -> Option<Origin> {
    vars.iter().find_map(|v| {
        get(v.name)
            .filter(|s| !s.trim().is_empty())
            .map(|value| Origin { var: v.name, value })
    })
}

fn lookup(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    fn ifname(vars: &'static [(&'static str, &'static str)]) -> Option<(&'static str, String)> {
        socket_ifname_in(&env(vars)).map(|s| (s.origin.var, s.nccl_spec()))
    }

    #[test]
    fn interface_precedence_phalanx_then_gloo_then_nccl() {
        let all = &[
            ("NCCL_SOCKET_IFNAME", "ib"),
            ("GLOO_SOCKET_IFNAME", "eth2"),
            ("PHALANX_SOCKET_IFNAME", "eth1"),
        ];
        assert_eq!(ifname(all), Some(("PHALANX_SOCKET_IFNAME", "eth1".into())));
        assert_eq!(
            ifname(&[("NCCL_SOCKET_IFNAME", "ib"), ("GLOO_SOCKET_IFNAME", "eth2")]),
            Some(("GLOO_SOCKET_IFNAME", "=eth2".into()))
        );
        assert_eq!(
            ifname(&[("NCCL_SOCKET_IFNAME", "docker0,lo")]),
            Some(("NCCL_SOCKET_IFNAME", "docker0,lo".into()))
        );
        assert_eq!(ifname(&[]), None);
    }

    #[test]
    fn an_empty_variable_counts_as_unset() {
        assert_eq!(
            ifname(&[
                ("PHALANX_SOCKET_IFNAME", ""),
                ("NCCL_SOCKET_IFNAME", "=eth1")
            ]),
            Some(("NCCL_SOCKET_IFNAME", "=eth1".into()))
        );
        assert_eq!(ifname(&[("GLOO_SOCKET_IFNAME", "  ")]), None);
    }

    #[test]
    fn each_variable_keeps_its_own_syntax() {
        // Gloo: exact names, whitespace around commas ignored, no NCCL operators.
        assert_eq!(
            ifname(&[("GLOO_SOCKET_IFNAME", "eth0, eth1,")]),
            Some(("GLOO_SOCKET_IFNAME", "=eth0,eth1".into()))
        );
        // NCCL and phalanx: passed on as written (prefix, ^ exclude, = exact).
        for spec in ["^docker0,lo", "=eth0", "eth", "^=lo"] {
            let got =
                socket_ifname_in(&|k: &str| (k == "NCCL_SOCKET_IFNAME").then(|| spec.to_string()))
                    .unwrap();
            assert_eq!(got.nccl_spec(), spec);
            assert_eq!(got.origin.to_string(), format!("NCCL_SOCKET_IFNAME={spec}"));
        }
        assert_eq!(SocketIfname::phalanx("eth1").nccl_spec(), "eth1");
    }

    fn level(vars: &'static [(&'static str, &'static str)]) -> (LogLevel, Option<&'static str>) {
        let s = log_level_in(&env(vars)).unwrap();
        (s.level, s.origin.map(|o| o.var))
    }

    #[test]
    fn log_level_precedence_phalanx_then_nccl_then_torch() {
        assert_eq!(level(&[]), (LogLevel::Warn, None));
        assert_eq!(
            level(&[
                ("TORCH_DISTRIBUTED_DEBUG", "DETAIL"),
                ("NCCL_DEBUG", "INFO"),
                ("PHALANX_DEBUG", "warn"),
            ]),
            (LogLevel::Warn, Some("PHALANX_DEBUG"))
        );
        assert_eq!(
            level(&[
                ("TORCH_DISTRIBUTED_DEBUG", "DETAIL"),
                ("NCCL_DEBUG", "INFO")
            ]),
            (LogLevel::Info, Some("NCCL_DEBUG"))
        );
        assert_eq!(
            level(&[("TORCH_DISTRIBUTED_DEBUG", "detail"), ("PHALANX_DEBUG", "")]),
            (LogLevel::Trace, Some("TORCH_DISTRIBUTED_DEBUG"))
        );
    }

    #[test]
    fn foreign_levels_map_onto_phalanx_levels() {
        let cases: &[(&str, &str, LogLevel)] = &[
            ("NCCL_DEBUG", "VERSION", LogLevel::Warn),
            ("NCCL_DEBUG", "WARN", LogLevel::Warn),
            ("NCCL_DEBUG", "info", LogLevel::Info),
            ("NCCL_DEBUG", "ABORT", LogLevel::Info),
            ("NCCL_DEBUG", "TRACE", LogLevel::Trace),
            ("TORCH_DISTRIBUTED_DEBUG", "OFF", LogLevel::Warn),
            ("TORCH_DISTRIBUTED_DEBUG", "INFO", LogLevel::Info),
            ("TORCH_DISTRIBUTED_DEBUG", "DETAIL", LogLevel::Trace),
            ("PHALANX_DEBUG", "error", LogLevel::Error),
            ("PHALANX_DEBUG", "Info", LogLevel::Info),
            ("PHALANX_DEBUG", "DEBUG", LogLevel::Debug),
            ("PHALANX_DEBUG", "TRACE", LogLevel::Trace),
        ];
        for &(var, value, want) in cases {
            let got = log_level_in(&|k: &str| (k == var).then(|| value.to_string())).unwrap();
            assert_eq!(got.level, want, "{var}={value}");
            assert_eq!(got.origin.unwrap().to_string(), format!("{var}={value}"));
        }
    }

    #[test]
    fn a_bad_level_names_the_variable_that_held_it() {
        // NCCL_DEBUG decides (PHALANX_DEBUG unset); its bad value is not passed over.
        let err = log_level_in(&env(&[
            ("NCCL_DEBUG", "VERBOSE"),
            ("TORCH_DISTRIBUTED_DEBUG", "INFO"),
        ]))
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("NCCL_DEBUG=\"VERBOSE\""), "{text}");
        assert!(text.contains("VERSION, WARN, INFO"), "{text}");
        assert!(!text.contains("PHALANX_DEBUG"), "{text}");
        let err = log_level_in(&env(&[("TORCH_DISTRIBUTED_DEBUG", "TRACE")])).unwrap_err();
        assert!(
            err.to_string()
                .contains("TORCH_DISTRIBUTED_DEBUG=\"TRACE\""),
            "{err}"
        );
    }

    #[test]
    fn nccl_levels_round_trip() {
        for l in [LogLevel::Warn, LogLevel::Info, LogLevel::Trace] {
            let got = log_level_in(&|k: &str| (k == "NCCL_DEBUG").then(|| l.nccl().to_string()));
            assert_eq!(got.unwrap().level, l);
        }
    }
}
