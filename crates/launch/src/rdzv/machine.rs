//! This machine's names and addresses, as deciding and hosting a store needs them.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::Error;

/// Whether `host` names this machine: a loopback address, one of its interfaces' addresses,
/// or its host name.
pub(crate) fn is_this_machine(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") || host == hostname() {
        return true;
    }
    let Ok(addrs) = (host, 0).to_socket_addrs() else {
        return false;
    };
    let local: Vec<IpAddr> = if_addrs::get_if_addrs()
        .map(|v| v.into_iter().map(|i| i.ip()).collect())
        .unwrap_or_default();
    addrs
        .map(|a| a.ip())
        .any(|ip| ip.is_loopback() || local.contains(&ip))
}

/// This machine's host name (rendezvous claims, the summary table); `MASTER_ADDR` or
/// `localhost` when the kernel gives none.
pub(crate) fn hostname() -> String {
    phalanx_core::host::hostname().unwrap_or_else(|| {
        phalanx_core::env::get(phalanx_core::env::MASTER_ADDR).unwrap_or_else(|| "localhost".into())
    })
}

/// Resolves `host:port`, retrying until `timeout` or until `interrupted` (a signal to the
/// agent): in Kubernetes a pod's own DNS name (node 0's `PET_MASTER_ADDR`) may resolve only
/// some time after the pod started.
pub(crate) fn resolve(
    host: &str,
    port: u16,
    timeout: Duration,
    interrupted: &dyn Fn() -> bool,
) -> Result<SocketAddr, Error> {
    let deadline = Instant::now() + timeout;
    let mut backoff = Duration::from_millis(50);
    loop {
        let reason = match (host, port).to_socket_addrs() {
            Ok(mut a) => match a.next() {
                Some(a) => return Ok(a),
                None => "no addresses".to_string(),
            },
            Err(e) => e.to_string(),
        };
        if Instant::now() + backoff >= deadline || interrupted() {
            return Err(Error::Resolve {
                addr: host.to_string(),
                reason: format!(
                    "{reason} (retried for {:.0} s, PHALANX_TIMEOUT)",
                    timeout.as_secs_f64()
                ),
            });
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// Warns when the store of a multi-node job would listen on loopback only because the name
/// given resolves there (Debian and Ubuntu map a machine's own host name to 127.0.1.1 in
/// /etc/hosts): the other hosts could not reach it.
pub(crate) fn warn_loopback_store(name: &str, addr: SocketAddr, nnodes_max: u32) {
    let loopback_name = name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if nnodes_max > 1 && addr.ip().is_loopback() && !loopback_name {
        eprintln!(
            "phalanx launch: warning: {name} resolves to {} on this host, a loopback address: \
             the store listens there and other hosts cannot reach it; give the address of an \
             interface the other hosts reach (--master-addr or --rdzv-endpoint)",
            addr.ip()
        );
    }
}
