//! Links between agents: a TCP connection from every agent to every other, which tells at once
//! that an agent's process ended, where its heartbeat would take its timeout (5 s,
//! `elastic/coordinate.rs`).
//!
//! Note [Agent links]
//! Each agent listens on a port of its own, published in the store (`agent/link/<node>`), and
//! connects to every other member's. Nothing flows on a link but one byte: an agent that ends
//! on purpose writes a goodbye on the links it accepted. When an agent's process ends any other
//! way (SIGKILL, its host's processes killed), its kernel closes its sockets, and the agents
//! connected to it read end-of-file at once: that agent is gone, with its workers (they die
//! with it, `PR_SET_PDEATHSIG`). A host that vanishes from the network closes nothing; its
//! heartbeat still names it after that timeout. Used under `--rdzv-backend etcd`
//! (Note [No node is special]), where losing any node, node 0 included, must cost the others at
//! most a step.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use phalanx_store::Store;

/// The goodbye of an agent that ends on purpose.
const BYE: u8 = 1;

/// This agent's links: its listener, the links it accepted (to say goodbye on) and what it
/// saw of the agents it connected to.
pub(crate) struct Links {
    accepted: Arc<Mutex<Vec<TcpStream>>>,
    /// Per node: the address connected to, and when its link closed without a goodbye.
    watched: Mutex<BTreeMap<u32, Watched>>,
}

struct Watched {
    addr: String,
    closed: Arc<Mutex<Option<Instant>>>,
}

fn key(node: u32) -> String {
    format!("agent/link/{node}")
}

impl Links {
    /// Listens on `ip` (the address the others reach this host at) and publishes the port as
    /// node `node`'s link.
    pub(crate) fn start(store: &dyn Store, node: u32, ip: IpAddr) -> std::io::Result<Links> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))?;
        let addr = listener.local_addr()?;
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let keep = accepted.clone();
        std::thread::Builder::new()
            .name("phalanx-links".into())
            .spawn(move || {
                for s in listener.incoming().flatten() {
                    keep.lock().unwrap_or_else(|p| p.into_inner()).push(s);
                }
            })?;
        store
            .set(&key(node), addr.to_string().as_bytes())
            .map_err(std::io::Error::other)?;
        Ok(Links {
            accepted,
            watched: Mutex::new(BTreeMap::new()),
        })
    }

    /// Connects to the members in `others` not linked yet (or whose link moved: a node that
    /// came back), each within a short bound; a node not reachable now is tried next time.
    /// `false` when the store did not answer: the rest waits for the next tick, as one read
    /// per node bounded by a quarter second each would hold the monitor through an etcd
    /// election (Note [The monitor does not wait out an election] in `coordinate.rs`).
    pub(crate) fn watch(&self, store: &dyn Store, others: &[u32]) -> bool {
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        for &g in others {
            match store.check(&[&key(g)]) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(_) => return false,
            }
            let Ok(addr) = store.get(&key(g)) else {
                return false;
            };
            let addr = String::from_utf8_lossy(&addr).into_owned();
            if watched.get(&g).is_some_and(|w| w.addr == addr) {
                continue;
            }
            let Ok(sockaddr) = addr.parse::<SocketAddr>() else {
                continue;
            };
            let closed = Arc::new(Mutex::new(None));
            let stream = match TcpStream::connect_timeout(&sockaddr, Duration::from_millis(300)) {
                Ok(stream) => stream,
                // The agent listens from its start to its end, and published the address
                // after it listened: a refusal means its process ended before this agent
                // connected (killed early in the round).
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    *closed.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                    watched.insert(g, Watched { addr, closed });
                    continue;
                }
                // Unreachable or slow: tried next time; the heartbeat still covers it.
                Err(_) => continue,
            };
            let mark = closed.clone();
            let spawned = std::thread::Builder::new()
                .name("phalanx-link".into())
                .spawn(move || {
                    let mut stream = stream;
                    let mut byte = [0u8; 1];
                    // Blocks until the peer says goodbye or its process (its kernel) closes.
                    match stream.read(&mut byte) {
                        Ok(1) if byte[0] == BYE => {}
                        _ => *mark.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now()),
                    }
                });
            if spawned.is_ok() {
                watched.insert(g, Watched { addr, closed });
            }
        }
        true
    }

    /// Node `g`'s link closed without a goodbye: when.
    pub(crate) fn closed(&self, g: u32) -> Option<Instant> {
        let watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        let w = watched.get(&g)?;
        let at = *w.closed.lock().unwrap_or_else(|p| p.into_inner());
        at
    }

    /// Node `g` left or came back: its next link is watched afresh.
    pub(crate) fn forget(&self, g: u32) {
        self.watched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&g);
    }
}

impl Drop for Links {
    /// Says goodbye: this agent ends on purpose.
    fn drop(&mut self) {
        for s in self
            .accepted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter_mut()
        {
            let _ = s.write_all(&[BYE]);
        }
    }
}
