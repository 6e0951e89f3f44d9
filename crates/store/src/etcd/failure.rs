//! What became of an etcd request that did not succeed, told from the client's error: surely
//! not carried out (try the next member), maybe carried out (Note [etcd receipts] in
//! `client.rs`), or refused.

use std::time::Duration;

/// What became of a request that did not succeed.
pub(super) enum Failure {
    /// Nothing answered in time (`last`: the last refusal seen, if any).
    Timeout {
        timeout: Duration,
        last: Option<String>,
    },
    /// It may or may not have landed ([`unsure`]).
    Unsure(etcd_client::Error),
    /// It was refused (a wrong request, a permission, …).
    Refused(etcd_client::Error),
}

/// Whether `e` says the request was surely not carried out: no connection to a member, or a
/// member that refused it for want of a leader (`require_leader` refuses before proposing).
pub(super) fn not_carried_out(e: &etcd_client::Error) -> bool {
    let text = format!("{e:?}");
    text.contains("ConnectError")
        || text.contains("tcp connect error")
        || text.contains("etcdserver: no leader")
}

/// Whether `e` leaves open whether the request landed: a proposal in flight when the leader
/// changed, a member that timed out waiting for the commit, a connection that broke after
/// sending, a member that did not answer an attempt in time.
pub(super) fn unsure(e: &etcd_client::Error) -> bool {
    let text = format!("{e:?}");
    [
        "leader changed",
        "request timed out",
        "Unavailable",
        "Cancelled",
        "transport error",
        "h2 protocol error",
        "connection reset",
        "broken pipe",
        // An attempt that got no answer in time (`request`): a member cut off, or slow.
        "TimedOut",
    ]
    .iter()
    .any(|m| text.contains(m))
}
