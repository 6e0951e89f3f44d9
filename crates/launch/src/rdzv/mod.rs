//! Where a job's agents meet: one trait ([`Rendezvous`], `backend.rs`) and one file per
//! backend, chosen from torchrun's spellings, which are read in one place (`spelling.rs`).
//!
//! - `static` (the default, `static_tcp.rs`): node 0 (`--node-rank 0`) hosts the store at
//!   `--master-addr:--master-port` (a multi-node agent left at the defaults takes
//!   `MASTER_ADDR`/`MASTER_PORT` from its environment, as Kubeflow's PyTorchJob sets them);
//!   every node gives its `--node-rank`. `--rdzv-endpoint HOST[:PORT]` may stand for the
//!   master address and port, as torchrun's static rendezvous takes it. `--standalone`:
//!   127.0.0.1 and a free port, whatever else is given.
//! - `c10d` (`c10d.rs`; `--rdzv-backend c10d --rdzv-endpoint HOST[:PORT] --rdzv-id ID`, the
//!   spelling of PyTorch's multi-node tutorials; port 29400 when none is given): the node
//!   whose own address `HOST` is (or the one given `--rdzv-conf is_host=1`) hosts the store
//!   and is node 0; every other node takes a node rank when it arrives (Note [c10d node
//!   ranks]), so no `--node-rank` is needed (one given is ignored, as torchrun ignores it).
//! - `etcd` (`etcd.rs`; `--rdzv-backend etcd --rdzv-endpoint h1:p1,h2:p2 --rdzv-id ID`, also
//!   spelled `etcd-v3`): the agents meet in an etcd cluster, which holds the whole job's
//!   store; no agent hosts one, and node ranks are taken on arrival from 0. `etcd-v2`, the
//!   API torchrun's etcd backend speaks, is refused: etcd 3.6 removed it.
//!
//! Whatever the backend, once the agents hold a store, each round's meeting is the same
//! (`claims/`: claims, layout, failures; `elastic/` for rounds of whichever nodes are there).
//!
//! ```
//! use phalanx_launch::{RdzvBackend, RdzvConf};
//! assert_eq!("c10d".parse::<RdzvBackend>().unwrap(), RdzvBackend::C10d);
//! assert_eq!("etcd".parse::<RdzvBackend>().unwrap(), RdzvBackend::Etcd);
//! assert!("etcd-v2".parse::<RdzvBackend>().unwrap_err().contains("3.6 removed"));
//! let conf: RdzvConf = "timeout=900,last_call_timeout=5,is_host=1".parse().unwrap();
//! assert_eq!(conf.join_timeout.unwrap().as_secs(), 900);
//! assert!("colour=blue".parse::<RdzvConf>().unwrap_err().contains("colour"));
//! ```

mod backend;
mod c10d;
pub(crate) mod claims;
mod etcd;
mod hosted;
mod machine;
mod node_rank;
mod spelling;
mod static_tcp;

pub(crate) use backend::{Arrival, Met, Rendezvous};
pub(crate) use machine::hostname;
pub(crate) use spelling::Spelling;
pub use spelling::{RdzvBackend, RdzvConf, C10D_DEFAULT_PORT};

use crate::Error;
use spelling::Meeting;

/// The backend the flags name, with where it meets the others (`var` reads the environment,
/// for static multi-node jobs left at the default address).
pub(crate) fn backend(
    flags: &Spelling,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Box<dyn Rendezvous>, Error> {
    let meeting = Meeting::from_spelling(flags, var)?;
    Ok(match flags.backend {
        _ if flags.standalone => Box::new(static_tcp::StaticTcp::new(meeting)),
        RdzvBackend::Static => Box::new(static_tcp::StaticTcp::new(meeting)),
        RdzvBackend::C10d => Box::new(c10d::C10d::new(meeting)),
        RdzvBackend::Etcd => Box::new(etcd::Etcd::new(meeting.addr)),
    })
}
