//! [`EtcdLease`]: a lease that this process keeps alive, so that the keys written through it
//! ([`EtcdStore::with_lease`](super::EtcdStore::with_lease)) go when the process does.
//!
//! Note [etcd leases]
//! etcd deletes every key attached to a lease once the lease goes `ttl` without a keep-alive.
//! A process that holds one sends a keep-alive every third of its `ttl`, from the store's own
//! runtime thread, so a busy caller does not starve it. When the process is killed, or its
//! host leaves the network, the keep-alives stop and its keys expire: nobody has to notice it
//! and clean up after it. An election does not expire a lease: the new leader gives every
//! lease a fresh `ttl`. Dropping an [`EtcdLease`] stops the keep-alives without revoking the
//! lease, so the keys outlive a clean exit by up to `ttl`, as they outlive a kill (a revoked
//! lease would take them at once, while the others may still read them).

use std::time::Duration;

use etcd_client::Client;

/// A lease kept alive until dropped (Note [etcd leases]).
#[derive(Debug)]
pub struct EtcdLease {
    id: i64,
    ttl: Duration,
    keeper: tokio::task::JoinHandle<()>,
}

impl EtcdLease {
    /// A lease granted as `id` with `ttl`, kept alive by `keeper`.
    pub(super) fn new(id: i64, ttl: Duration, keeper: tokio::task::JoinHandle<()>) -> Self {
        EtcdLease { id, ttl, keeper }
    }

    /// etcd's id of the lease.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// How long its keys outlive the last keep-alive.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

impl Drop for EtcdLease {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

/// Keeps lease `id` alive: a keep-alive every third of `ttl`, the stream opened again when it
/// breaks (a member lost, an election) or its answer is late, until the task is aborted or
/// etcd says the lease is gone (expired, or revoked).
///
/// A member cut off by a partition refuses nothing: a stream opened on it just never answers.
/// Waiting a whole third of the time to live for that answer let two such picks in a row
/// expire the lease of an agent that was alive and reachable (seen in the netns partition
/// drill: a survivor's own node rank and master address vanished). A healthy member answers
/// in milliseconds, so an answer is awaited a tenth of the time to live, and the next stream
/// (most likely on another member) opens at once.
///
/// Opening a stream is bounded the same way: the client's open waits for the first answer,
/// and one opened on a cut-off member waited until HTTP/2's keep-alive dropped the connection
/// (2 s + 5 s, longer than the 5 s time to live), which expired a survivor's lease in the
/// partition drill all the same (seen once in CI).
pub(super) async fn keep_alive(mut client: Client, id: i64, ttl: Duration) {
    let every = ttl / 3;
    let answer_within = (ttl / 10).clamp(Duration::from_millis(200), Duration::from_secs(1));
    loop {
        let (mut keeper, mut stream) =
            match tokio::time::timeout(answer_within, client.lease_keep_alive(id)).await {
                Ok(Ok(opened)) => opened,
                // The open's first answer said the lease is gone: nothing to keep.
                Ok(Err(etcd_client::Error::LeaseKeepAliveError(e))) if e.contains("not found") => {
                    return
                }
                // Another member, most likely, on the next try: a short pause, which keeps a
                // cluster that refuses everything from being asked in a tight loop.
                _ => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
        // The open's answer was a keep-alive: the next one is due a third of `ttl` on.
        tokio::time::sleep(every).await;
        loop {
            if keeper.keep_alive().await.is_err() {
                break;
            }
            match tokio::time::timeout(answer_within, stream.message()).await {
                // A lease etcd no longer has: nothing to keep.
                Ok(Ok(Some(answer))) if answer.ttl() <= 0 => return,
                Ok(Ok(Some(_))) => tokio::time::sleep(every).await,
                _ => break,
            }
        }
    }
}
