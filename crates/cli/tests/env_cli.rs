//! `phalanx env` through the real binary: the interface and log level a rank would use here,
//! each with the variable that decided (Note [Borrowed variables] in phalanx-core), in text and
//! `--json`; a bad value named with the variable that held it.

mod launch_util;

use std::time::Duration;

use launch_util::{phalanx, run};

const DEADLINE: Duration = Duration::from_secs(30);

fn env(vars: &[(&str, &str)], flags: &[&str]) -> launch_util::Finished {
    let mut cmd = phalanx();
    cmd.arg("env").args(flags).envs(vars.iter().copied());
    let f = run(cmd, DEADLINE);
    f.assert_ok();
    f
}

fn json(vars: &[(&str, &str)]) -> serde_json::Value {
    let f = env(vars, &["--json"]);
    serde_json::from_str(&f.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{}", f.stdout))
}

/// The line of the text output that starts with `name`.
fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name:?} line:\n{out}"))
}

#[test]
fn a_pytorch_profile_decides_and_is_named() {
    // The seed's two lines, with loopback standing in for the cluster's interface.
    let vars = [("NCCL_DEBUG", "INFO"), ("NCCL_SOCKET_IFNAME", "lo")];
    let out = env(&vars, &[]).stdout;
    assert_eq!(
        line(&out, "interface "),
        "interface                lo 127.0.0.1 (from NCCL_SOCKET_IFNAME=lo)"
    );
    assert_eq!(
        line(&out, "log level "),
        "log level                INFO (from NCCL_DEBUG=INFO)"
    );
    let j = json(&vars);
    assert_eq!(j["interface"]["ifname"], "lo", "{j:#}");
    assert_eq!(j["interface"]["from"]["var"], "NCCL_SOCKET_IFNAME", "{j:#}");
    assert_eq!(j["interface"]["from"]["value"], "lo", "{j:#}");
    assert_eq!(j["log_level"]["level"], "INFO", "{j:#}");
    assert_eq!(j["log_level"]["from"]["var"], "NCCL_DEBUG", "{j:#}");
    // Registered: the table lists them with their values.
    let row = j["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "NCCL_SOCKET_IFNAME")
        .unwrap();
    assert_eq!(row["value"], "lo", "{row:#}");
}

#[test]
fn phalanx_variables_win_and_nothing_set_is_said() {
    let j = json(&[
        ("PHALANX_SOCKET_IFNAME", "=lo"),
        ("GLOO_SOCKET_IFNAME", "bogus0"),
        ("PHALANX_DEBUG", "trace"),
        ("TORCH_DISTRIBUTED_DEBUG", "OFF"),
    ]);
    assert_eq!(
        j["interface"]["from"]["var"], "PHALANX_SOCKET_IFNAME",
        "{j:#}"
    );
    assert_eq!(j["log_level"]["level"], "TRACE", "{j:#}");
    assert_eq!(j["log_level"]["from"]["var"], "PHALANX_DEBUG", "{j:#}");
    let j = json(&[("TORCH_DISTRIBUTED_DEBUG", "DETAIL")]);
    assert_eq!(j["log_level"]["level"], "TRACE", "{j:#}");
    assert_eq!(j["interface"]["from"], serde_json::Value::Null, "{j:#}");
    let out = env(&[], &[]).stdout;
    assert!(
        line(&out, "interface ").ends_with(
            "(by the route to MASTER_ADDR=127.0.0.1; no PHALANX_/GLOO_/NCCL_SOCKET_IFNAME set)"
        ),
        "{out}"
    );
    assert!(line(&out, "log level ").contains("WARN (default;"), "{out}");
}

#[test]
fn bad_values_are_named_with_the_variable_that_held_them() {
    // Gloo's names are exact: "l" is no interface, though NCCL's syntax would take it as `lo`.
    let vars = [("GLOO_SOCKET_IFNAME", "l"), ("NCCL_DEBUG", "LOUD")];
    let j = json(&vars);
    let err = j["interface"]["error"].as_str().unwrap_or_default();
    assert!(
        err.starts_with("GLOO_SOCKET_IFNAME=\"l\" matches no interface")
            && err.contains("exact names")
            && err.contains("lo"),
        "{j:#}"
    );
    let err = j["log_level"]["error"].as_str().unwrap_or_default();
    assert!(err.contains("NCCL_DEBUG=\"LOUD\""), "{j:#}");
    assert_eq!(j["log_level"]["level"], "WARN", "{j:#}");
    // Every command warns once about the level, naming the variable, and goes on.
    let f = env(&vars, &[]);
    assert!(
        f.stderr
            .contains("warning: environment variable NCCL_DEBUG=\"LOUD\" is invalid"),
        "{}",
        f.stderr
    );
    assert!(!f.stderr.contains("PHALANX_DEBUG"), "{}", f.stderr);
}
