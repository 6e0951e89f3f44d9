//! The one registry of environment variables phalanx reads.
//!
//! Each variable is declared once (in `env/vars.rs`) with its default, meaning and category, in NCCL's
//! manner; `docs/env-vars.md` is generated from [`REGISTRY`] by `phalanx env --markdown`
//! and a test keeps the two equal.
//!
//! ```
//! use phalanx_core::env;
//! assert!(env::REGISTRY.iter().any(|v| v.name == "PHALANX_TIMEOUT"));
//! assert_eq!(env::closest("PHALANX_TIMEOTU"), Some("PHALANX_TIMEOUT"));
//! ```
//!
//! Some settings can also come from the variables PyTorch users already set
//! (`NCCL_SOCKET_IFNAME`, `NCCL_DEBUG`, …): [`socket_ifname`] and [`log_level`] read them in
//! order and say which one decided (Note [Borrowed variables] in `env/fallback.rs`).

mod fallback;
mod vars;

pub use fallback::{
    log_level, log_level_in, socket_ifname, socket_ifname_in, LogLevel, LogSetting, Origin,
    SocketIfname, DEBUG_VARS, SOCKET_IFNAME_VARS,
};
pub use vars::*;

/// Reads a registered variable; empty values count as unset.
pub fn get(var: EnvVar) -> Option<String> {
    std::env::var(var.name).ok().filter(|v| !v.is_empty())
}

/// The registered `PHALANX_*` name closest to `name` (edit distance at most 3).
pub fn closest(name: &str) -> Option<&'static str> {
    REGISTRY
        .iter()
        .filter(|v| v.name.starts_with("PHALANX_"))
        .map(|v| (edit_distance(name, v.name), v.name))
        .filter(|(d, _)| *d <= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// `PHALANX_*` variables set in the environment that the registry does not know, each with
/// the closest known name; callers log these as warnings.
pub fn unknown_phalanx_vars() -> Vec<(String, Option<&'static str>)> {
    let mut out: Vec<_> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("PHALANX_") && !REGISTRY.iter().any(|v| v.name == k))
        .map(|k| {
            let near = closest(&k);
            (k, near)
        })
        .collect();
    out.sort();
    out
}

/// Levenshtein distance between `a` and `b`, for "did you mean" suggestions (variable names
/// here, flags in `phalanx launch`).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Renders the registry as `docs/env-vars.md`, in NCCL's format.
pub fn markdown() -> String {
    let mut s = String::from(
        "# Environment variables\n\nGenerated from `crates/core/src/env/vars.rs` by `phalanx env --markdown`; do not edit by hand.\n",
    );
    for (cat, title) in [
        (Category::Launcher, "Launcher (torchrun-compatible)"),
        (Category::Config, "System configuration"),
        (
            Category::Debug,
            "Debugging (do not keep these in production)",
        ),
    ] {
        s.push_str(&format!("\n## {title}\n"));
        for v in REGISTRY.iter().filter(|v| v.category == cat) {
            let default = if v.default.is_empty() {
                "unset"
            } else {
                v.default
            };
            s.push_str(&format!(
                "\n### {}\n\n{}\n\nDefault: `{}` (since {})\n",
                v.name, v.doc, default, v.since
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_name() {
        assert_eq!(closest("PHALANX_DEBGU"), Some("PHALANX_DEBUG"));
        assert_eq!(
            closest("PHALANX_SOCKET_IFNAM"),
            Some("PHALANX_SOCKET_IFNAME")
        );
        assert_eq!(closest("SOMETHING_ELSE_ENTIRELY"), None);
    }

    #[test]
    fn docs_are_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/env-vars.md");
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        if std::env::var_os("PHALANX_BLESS").is_some() {
            std::fs::write(path, markdown()).unwrap();
            return;
        }
        assert_eq!(
            on_disk,
            markdown(),
            "docs/env-vars.md is stale: rerun with PHALANX_BLESS=1"
        );
    }
}
