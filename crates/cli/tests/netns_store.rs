//! A job started without `phalanx launch` (as mpirun or srun would start it): a standalone
//! `phalanx store` on its own host, ranks on two other hosts given only the torchrun
//! variables, `TORCHELASTIC_USE_AGENT_STORE=True` (the store is not rank 0's) and the job
//! token; `phalanx bench allreduce --check` must pass over real TCP between the namespaces.

mod netns_util;

use std::time::Duration;

use netns_util::{assert_all_ok, background, dump, run_all, Hosts, Net};

const STORE_PORT: u16 = 29400;

#[test]
fn needs_root_netns_standalone_store_on_a_third_host_serves_a_launcherless_job() {
    let Some(h) = Hosts::up(
        "needs_root_netns_standalone_store_on_a_third_host_serves_a_launcherless_job",
        3,
        &Net::default(),
    ) else {
        return;
    };
    let mut store = h.phalanx(2);
    store
        .args(["store", "--port", &STORE_PORT.to_string()])
        .args(["--host", &h.addr(2)]);
    let store = background(store);
    h.wait_listening(2, STORE_PORT, Duration::from_secs(20));
    let cmds = (0..2)
        .map(|i| {
            let mut c = h.phalanx(i);
            c.args(["bench", "allreduce", "--sizes", "4K,1M", "--iters", "2"])
                .args(["--check", "--json"])
                .env("RANK", i.to_string())
                .env("WORLD_SIZE", "2")
                .env("LOCAL_RANK", "0")
                .env("LOCAL_WORLD_SIZE", "1")
                .env("MASTER_ADDR", h.addr(2))
                .env("MASTER_PORT", STORE_PORT.to_string())
                .env("TORCHELASTIC_USE_AGENT_STORE", "True")
                .env("PHALANX_DEBUG", "INFO");
            c
        })
        .collect();
    let nodes = run_all(cmds, Duration::from_secs(60));
    let (store_out, store_err) = store.stop();
    assert_all_ok(&nodes);
    assert!(
        store_out.contains(&format!("listening on {}:{STORE_PORT}", h.addr(2))),
        "{store_out}\n{store_err}"
    );
    let rows: Vec<&str> = nodes[0]
        .stdout
        .lines()
        .filter(|l| l.contains("\"check\":\"ok\""))
        .collect();
    assert_eq!(rows.len(), 2, "{}", dump(&nodes));
    for (i, f) in nodes.iter().enumerate() {
        // Each rank reached the store on host 2 and listens on its own host's address.
        let init = format!("ip={} store={}:{STORE_PORT}", h.addr(i), h.addr(2));
        assert!(f.stderr.contains(&init), "no {init:?}:\n{}", dump(&nodes));
    }
}
