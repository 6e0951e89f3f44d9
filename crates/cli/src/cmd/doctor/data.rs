//! What each `phalanx doctor` rank measures and publishes in the store (`doctor/result/<rank>`),
//! and what rank 0 assembles from it: plain serde types, no I/O.

use serde::{Deserialize, Serialize};

/// Where a rank sits and what it would use: published before any connection is tried.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct RankInfo {
    pub(crate) rank: usize,
    pub(crate) node_rank: usize,
    pub(crate) local_rank: usize,
    pub(crate) local_world_size: usize,
    pub(crate) hostname: String,
    /// The interface `init_process_group` would listen on (`PHALANX_SOCKET_IFNAME`, else
    /// `GLOO_SOCKET_IFNAME`, else `NCCL_SOCKET_IFNAME`, else the route to `MASTER_ADDR`);
    /// `None` when the selection failed (`if_error` says why).
    pub(crate) ifname: Option<String>,
    /// The variable that chose the interface and its value; `None`: the route to
    /// `MASTER_ADDR` (no interface variable set). Absent from an older doctor's results.
    #[serde(default)]
    pub(crate) ifname_from: Option<IfnameFrom>,
    pub(crate) ip: Option<String>,
    /// The doctor's own listener on that address (the measurement sockets).
    pub(crate) port: Option<u16>,
    pub(crate) if_error: Option<String>,
    pub(crate) shm: ShmProbe,
}

/// The variable that chose a rank's interface (Note [Borrowed variables] in phalanx-core).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct IfnameFrom {
    pub(crate) var: String,
    pub(crate) value: String,
}

impl IfnameFrom {
    /// How a report says what chose an interface: `from NCCL_SOCKET_IFNAME=eth1`, or `by the
    /// route to MASTER_ADDR` for `None`.
    pub(crate) fn describe(from: Option<&IfnameFrom>) -> String {
        match from {
            Some(f) => format!("from {}={}", f.var, f.value),
            None => "by the route to MASTER_ADDR".into(),
        }
    }
}

/// Shared memory on this rank's host: free space of `/dev/shm` and whether a segment of the
/// size the process group maps could be created.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct ShmProbe {
    pub(crate) free_bytes: Option<u64>,
    pub(crate) segment_bytes: usize,
    /// `None`: the segment was created (and removed); otherwise the error.
    pub(crate) error: Option<String>,
}

/// This rank's view of the connections: `out[p]` is `None` when this rank connected to rank
/// `p` and got its answer (else the error), `inc[p]` whether rank `p`'s connection arrived.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub(crate) struct Reach {
    pub(crate) out: Vec<Option<String>>,
    pub(crate) inc: Vec<bool>,
}

/// Round-trip times of small messages, in microseconds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rtt {
    pub(crate) median_us: f64,
    pub(crate) min_us: f64,
    pub(crate) samples: usize,
}

/// This rank's clock minus rank 0's (NTP's offset, from the exchange with the least delay).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub(crate) struct Clock {
    pub(crate) offset_us: f64,
    pub(crate) rtt_us: f64,
}

/// What one rank measured on its link to `peer`: the lower rank of a pair measures the RTT,
/// each side its own sending bandwidth, the partner of rank 0 its clock.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub(crate) struct Half {
    pub(crate) peer: usize,
    pub(crate) rtt: Option<Rtt>,
    /// This rank → `peer`, Gbit/s.
    pub(crate) tx_gbps: Option<f64>,
    pub(crate) tx_bytes: u64,
    pub(crate) clock: Option<Clock>,
    pub(crate) error: Option<String>,
}

/// The real process group, started after the links were measured.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct Mesh {
    /// `None`: `init_process_group` connected and an allreduce gave the right sum.
    pub(crate) error: Option<String>,
    pub(crate) shared_memory: bool,
}

/// Everything one rank publishes at the end.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct RankResult {
    pub(crate) info: RankInfo,
    pub(crate) reach: Reach,
    pub(crate) halves: Vec<Half>,
    /// `None` when the process group was not started (a peer was unreachable).
    pub(crate) mesh: Option<Mesh>,
}

/// Limits the checks compare against (flags of `phalanx doctor`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct Limits {
    pub(crate) max_clock_skew_us: f64,
    pub(crate) min_gbps: Option<f64>,
    pub(crate) bandwidth_ms: f64,
    pub(crate) bandwidth_bytes: usize,
}

/// A check's outcome; `fail` makes `phalanx doctor` exit non-zero.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Ok,
    Warn,
    Fail,
    Skip,
}

impl Status {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        }
    }
}

/// One line of the checks table.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct Check {
    pub(crate) name: String,
    pub(crate) status: Status,
    pub(crate) detail: String,
}

/// One rank in the report.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct RankRow {
    #[serde(flatten)]
    pub(crate) info: RankInfo,
    pub(crate) uses_shared_memory: Option<bool>,
    pub(crate) clock_offset_us: Option<f64>,
    pub(crate) clock_rtt_us: Option<f64>,
}

/// One pair of ranks in the report.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct LinkRow {
    pub(crate) a: usize,
    pub(crate) b: usize,
    pub(crate) same_node: bool,
    pub(crate) reachable: bool,
    pub(crate) errors: Vec<String>,
    pub(crate) rtt: Option<Rtt>,
    pub(crate) a_to_b_gbps: Option<f64>,
    pub(crate) b_to_a_gbps: Option<f64>,
}

impl LinkRow {
    /// The slower direction, when both were measured.
    pub(crate) fn gbps(&self) -> Option<f64> {
        Some(self.a_to_b_gbps?.min(self.b_to_a_gbps?))
    }
}

/// The whole report (`--json` prints it as is).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct Report {
    pub(crate) world_size: usize,
    pub(crate) nnodes: usize,
    pub(crate) limits: Limits,
    pub(crate) ranks: Vec<RankRow>,
    pub(crate) links: Vec<LinkRow>,
    pub(crate) checks: Vec<Check>,
    /// `[a, b]` of the link with the lowest bandwidth (its slower direction).
    pub(crate) slowest_link: Option<[usize; 2]>,
    /// One line: the slowest link, or what failed.
    pub(crate) verdict: String,
    pub(crate) ok: bool,
}
