//! `phalanx env`: the registry of environment variables, as a table, as JSON or as
//! docs/env-vars.md, and the settings they decide here, each with the variable that decided
//! (Note [Borrowed variables] in phalanx-core: `NCCL_SOCKET_IFNAME=eth1` chooses the interface
//! when no phalanx or Gloo variable is set).
use std::process::ExitCode;

use phalanx_core::env::{self, Origin};
use serde::Serialize;

/// Flags of `phalanx env`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Print docs/env-vars.md instead of a table.
    #[arg(long)]
    markdown: bool,
    /// Print one JSON object: every variable, and the interface and log level with the
    /// variable that decided each.
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
}

/// One registered variable and its value here (the token is never shown).
#[derive(Serialize)]
struct VarRow {
    name: &'static str,
    value: Option<String>,
    default: &'static str,
}

/// A variable and the value it held.
#[derive(Serialize)]
struct Decider {
    var: &'static str,
    value: String,
}

impl Decider {
    fn new(o: &Origin) -> Decider {
        Decider {
            var: o.var,
            value: o.value.clone(),
        }
    }
}

/// The interface a rank started here would listen on.
#[derive(Serialize)]
struct Interface {
    ifname: Option<String>,
    ip: Option<String>,
    /// `None`: no interface variable is set, so the route to `master_addr` decided.
    from: Option<Decider>,
    master_addr: String,
    /// The selection failed: the message names the variable that held the spec.
    error: Option<String>,
}

/// phalanx's log level here.
#[derive(Serialize)]
struct Level {
    level: &'static str,
    /// `None`: no level variable is set (WARN).
    from: Option<Decider>,
    /// The deciding variable holds no level (WARN is used); names the variable.
    error: Option<String>,
}

#[derive(Serialize)]
struct Report {
    variables: Vec<VarRow>,
    interface: Interface,
    log_level: Level,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.markdown {
        print!("{}", env::markdown());
        return Ok(ExitCode::SUCCESS);
    }
    let report = Report {
        variables: env::REGISTRY
            .iter()
            .map(|v| VarRow {
                name: v.name,
                value: env::get(*v).map(|c| {
                    if [env::PHALANX_TOKEN.name, env::PHALANX_ETCD_PASSWORD.name].contains(&v.name)
                    {
                        "<set, hidden>".to_string()
                    } else {
                        c
                    }
                }),
                default: v.default,
            })
            .collect(),
        interface: interface(),
        log_level: level(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", text(&report));
    }
    for (name, near) in env::unknown_phalanx_vars() {
        match near {
            Some(n) => eprintln!("warning: unknown variable {name}; did you mean {n}?"),
            None => eprintln!("warning: unknown variable {name}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The interface as `init_process_group` would choose it in this environment.
fn interface() -> Interface {
    let setting = env::socket_ifname();
    let master_addr = env::get(env::MASTER_ADDR).unwrap_or_else(|| env::MASTER_ADDR.default.into());
    let sel = phalanx_transport::ifname::select_from(setting.as_ref(), &master_addr);
    Interface {
        ifname: sel.as_ref().ok().map(|s| s.ifname.clone()),
        ip: sel.as_ref().ok().map(|s| s.ip.to_string()),
        from: setting.as_ref().map(|s| Decider::new(&s.origin)),
        master_addr,
        error: sel.err().map(|e| e.to_string()),
    }
}

fn level() -> Level {
    match env::log_level() {
        Ok(s) => Level {
            level: s.level.name(),
            from: s.origin.as_ref().map(Decider::new),
            error: None,
        },
        Err(e) => Level {
            level: env::LogLevel::Warn.name(),
            from: None,
            error: Some(e.to_string()),
        },
    }
}

/// The table, then one line per setting: `interface  eth1 10.0.0.2 (from NCCL_SOCKET_IFNAME=eth1)`.
fn text(r: &Report) -> String {
    let mut s = String::new();
    for v in &r.variables {
        let shown = match &v.value {
            Some(c) => c.clone(),
            None => format!(
                "(default {})",
                if v.default.is_empty() {
                    "unset"
                } else {
                    v.default
                }
            ),
        };
        s.push_str(&format!("{:<24} {}\n", v.name, shown));
    }
    s.push_str("\nsettings (what a rank started here would use)\n");
    let i = &r.interface;
    let chosen = match (&i.ifname, &i.ip, &i.error) {
        (Some(n), Some(ip), _) => format!("{n} {ip}"),
        (_, _, Some(e)) => format!("error: {e}"),
        _ => "?".into(),
    };
    let by = match &i.from {
        Some(f) => format!("from {}={}", f.var, f.value),
        None => format!(
            "by the route to MASTER_ADDR={}; no PHALANX_/GLOO_/NCCL_SOCKET_IFNAME set",
            i.master_addr
        ),
    };
    if i.error.is_some() {
        // The error already names the variable and its value.
        s.push_str(&format!("{:<24} {chosen}\n", "interface"));
    } else {
        s.push_str(&format!("{:<24} {chosen} ({by})\n", "interface"));
    }
    let l = &r.log_level;
    let by = match (&l.from, &l.error) {
        (_, Some(e)) => format!("warning: {e}"),
        (Some(f), None) => format!("from {}={}", f.var, f.value),
        (None, None) => {
            "default; no PHALANX_DEBUG, NCCL_DEBUG or TORCH_DISTRIBUTED_DEBUG set".into()
        }
    };
    s.push_str(&format!("{:<24} {} ({by})\n", "log level", l.level));
    s
}
