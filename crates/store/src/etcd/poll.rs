//! The client a fault-tolerant worker's polls go through ([`PollClient`]): reads that any
//! member answers from its own copy, leader or not.
//!
//! Note [A poll reads serializably]
//! A fault-tolerant job's workers poll the generation counter every step (at most every 50 ms
//! each, Note [FT generations] in phalanx-pg). As `add(key, 0)` that was a transaction
//! through the leader, two keys written, each poll: 20 writes a second per worker, and, while
//! the cluster elected a leader (its leader's member lost), a wait of a second or two inside
//! a training step, although nothing of the job had failed (measured: the epoch holding a
//! leader's SIGKILL took 1.25 s against 0.23 s). Likewise the one look a survivor takes at a
//! dead peer's published error, to name it, held the regroup up for the whole election. A
//! serializable read is answered by the member the client talks to, from its own copy,
//! leader or not, and writes nothing. It may be a moment behind the newest write, which both
//! tolerate: the ranks agree on the newest generation they saw (an allreduce MAX), a
//! generation seen late is taken at the next step, an error seen late only words the failure
//! less well, and everything that changes the job (the generation's log, its bootstrap) is
//! read linearizably. A member cut off by a partition still answers from its stale copy: that
//! rank trains on until its next collective fails, and its regroup, which reads and writes
//! through the quorum, is fenced as before.
//!
//! The reads go through a client of their own, which does not ask for a leader
//! (`require_leader`, which every other request asks for, makes a member without one refuse
//! everything, a serializable read included). It is connected with the store's own client,
//! while the cluster answers: with a user and password, etcd's client authenticates as it
//! connects, and a first poll during an election would otherwise wait the election out.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions, KvClient};

/// The bound on one attempt of a poll's read: a member answers a serializable read from its
/// own copy at once, so a longer wait means the request went to a member that is gone or cut
/// off (its host lost with it, seen in the node drills: 2 s, the default bound, inside a
/// training step), and it is sent again elsewhere.
pub(super) const POLL_ATTEMPT: Duration = Duration::from_millis(100);

/// The client of polls (Note [A poll reads serializably]).
pub(super) struct PollClient(Client);

impl PollClient {
    /// Connects to `urls` with the store's `options`, except that it does not ask for a
    /// leader.
    pub(super) async fn connect(
        urls: &[String],
        options: ConnectOptions,
    ) -> Result<PollClient, etcd_client::Error> {
        let options = options.with_require_leader(false);
        Ok(PollClient(Client::connect(urls, Some(options)).await?))
    }

    /// The client, whose key-value calls the store bounds and retries.
    pub(super) fn client(&self) -> &Client {
        &self.0
    }

    /// `key`'s value, read serializably through `kv` (one of this client's), or `None`.
    pub(super) async fn read(
        mut kv: KvClient,
        key: String,
    ) -> Result<Option<Vec<u8>>, etcd_client::Error> {
        let options = GetOptions::new().with_serializable();
        let r = kv.get(key, Some(options)).await?;
        Ok(r.kvs().first().map(|kv| kv.value().to_vec()))
    }
}
