//! The namespace harness itself (`tests/netns/netns.sh` and the `Hosts` guard): hosts reach
//! each other only inside their setup, teardown kills what was left running and deletes every
//! namespace, a failed `up` leaves nothing behind, and `down` is idempotent.

mod netns_util;

use std::process::Command;
use std::time::{Duration, Instant};

use netns_util::{Hosts, Net};

fn script() -> String {
    format!("{}/../../tests/netns/netns.sh", env!("CARGO_MANIFEST_DIR"))
}

fn namespaces_of(id: u32) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("phx-{id}-")))
        .map(String::from)
        .collect();
    v.sort();
    v
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn needs_root_netns_drop_kills_leftover_processes_and_deletes_namespaces() {
    let Some(h) = Hosts::up(
        "needs_root_netns_drop_kills_leftover_processes_and_deletes_namespaces",
        2,
        &Net {
            two_ifaces: true,
            rate: Some("1gbit".into()),
            htb: false,
        },
    ) else {
        return;
    };
    let id = h.id;
    assert_eq!(
        namespaces_of(id),
        [
            format!("phx-{id}-0"),
            format!("phx-{id}-1"),
            format!("phx-{id}-hub")
        ]
    );
    // Host 1 answers on both of its addresses from host 0 (bash's /dev/tcp, no extra tools).
    let server = Command::new("ip")
        .args(["netns", "exec", &h.ns(1), "sleep", "300"])
        .spawn()
        .unwrap();
    let pid = server.id();
    for addr in [h.addr(1), h.addr2(1)] {
        let out = Command::new("ip")
            .args(["netns", "exec", &h.ns(0), "bash", "-c"])
            .arg(format!(
                "timeout 5 bash -c 'exec 3<>/dev/tcp/{addr}/9' 2>&1; echo rc=$?"
            ))
            .output()
            .unwrap();
        // Nothing listens on port 9: "connection refused" proves the host is reachable (an
        // unreachable one would time out or report no route).
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Connection refused"), "{addr}: {text}");
    }
    assert!(alive(pid));
    // The child is deliberately left running: the guard must end it.
    std::mem::forget(server);
    drop(h);
    assert!(namespaces_of(id).is_empty(), "{:?}", namespaces_of(id));
    let end = Instant::now() + Duration::from_secs(5);
    while alive(pid) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!alive(pid), "pid {pid} survived teardown");
}

#[test]
fn needs_root_netns_failed_up_leaves_nothing_and_down_is_idempotent() {
    let Some(h) = Hosts::up(
        "needs_root_netns_failed_up_leaves_nothing_and_down_is_idempotent",
        1,
        &Net::default(),
    ) else {
        return;
    };
    // Claim a fresh id by hand: the guard's id + 1 may belong to another run, so retry.
    let mut id = h.id;
    let out = loop {
        id = id % 254 + 1;
        // An invalid rate fails at the tc step, after namespaces and links exist.
        let out = Command::new("bash")
            .arg(script())
            .args(["up", "2", "--id", &id.to_string(), "--rate", "bogus"])
            .output()
            .unwrap();
        if out.status.code() != Some(3) {
            break out;
        }
    };
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(namespaces_of(id).is_empty(), "{:?}", namespaces_of(id));
    assert!(!std::path::Path::new(&format!("/run/phx-netns/{id}")).exists());
    for _ in 0..2 {
        let st = Command::new("bash")
            .arg(script())
            .args(["down", "--id", &id.to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }
    // The guard's own setup is untouched by all this.
    assert_eq!(namespaces_of(h.id).len(), 2);
}
