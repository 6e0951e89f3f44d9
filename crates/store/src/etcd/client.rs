//! [`EtcdStore`]: the job's store kept in an etcd cluster (etcd's v3 API), so that no host of
//! the job holds it and losing any one host, node 0 included, leaves it whole.
//!
//! Every key lives under the job's prefix (`/phalanx/<job>/`). The operations keep the TCP
//! store's semantics (the same tests run on both, `crates/store/tests/store/store_etcd.rs`):
//! - `get`, `wait` and `multi_get` block until their keys exist: a read, then a watch from the
//!   revision after that read, so that no write between the two is missed;
//! - `add`, `append` and `compare_set` are transactions on the key's `mod_revision`, retried
//!   when another client wrote in between (etcd has no atomic increment);
//! - `multi_set` is one transaction;
//! - every request asks for a leader (`require_leader`): a cluster that lost its quorum answers
//!   at once with an error naming etcd and its endpoints, rather than never.
//!
//! The calls block: each store holds a small runtime of its own for the gRPC client.
//!
//! ```no_run
//! use phalanx_store::{EtcdOptions, EtcdStore, Store};
//! let o = EtcdOptions::new("127.0.0.1:2379", "my-job").unwrap();
//! let store = EtcdStore::connect(&o).unwrap();
//! store.set("ready", b"yes").unwrap();
//! assert_eq!(store.get("ready").unwrap(), b"yes");
//! assert_eq!(store.add("count", 2).unwrap(), 2);
//! store.delete_prefix().unwrap(); // the job's keys go when the job ends
//! ```

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, EventType, GetOptions, KvClient, PutOptions, Txn,
    TxnOp, TxnOpResponse, WatchOptions,
};

use super::connect;
use super::failure::{not_carried_out, unsure, Failure};
use super::lease::{self, EtcdLease};
use super::options::EtcdOptions;
use super::poll::{PollClient, POLL_ATTEMPT};
use crate::{Error, Result, Store};

/// How many operations etcd takes in one transaction (its `--max-txn-ops` default).
const MAX_TXN_OPS: usize = 128;

/// A [`Store`] whose keys live in etcd, under one job's prefix.
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
    timeout: Arc<Mutex<Duration>>,
    /// The lease the keys written through this handle are attached to (Note [etcd leases]).
    lease: Option<i64>,
    /// A bound on each attempt of this handle's requests tighter than the one its timeout
    /// gives (Note [An attempt's bound]).
    attempt: Option<Duration>,
}

struct Inner {
    runtime: tokio::runtime::Runtime,
    client: Client,
    /// The client of polls (Note [A poll reads serializably]).
    poll: PollClient,
    prefix: String,
    endpoints: String,
    /// Tells this client's receipts from others' (Note [etcd receipts]).
    nonce: String,
    receipts: AtomicU64,
    /// Requests sent (watches included), for `phalanx bench rendezvous`.
    requests: AtomicU64,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.inner.endpoints)
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

impl EtcdStore {
    /// Connects to the cluster and checks that a member answers (and, with a user, that the
    /// password is right), retrying until `o.connect_timeout`.
    pub fn connect(o: &EtcdOptions) -> Result<EtcdStore> {
        let endpoints = o.endpoints_text();
        let fail = |op: &'static str, reason: String| Error::Etcd {
            endpoints: endpoints.clone(),
            op,
            reason,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("phalanx-etcd")
            .enable_all()
            .build()
            .map_err(|e| fail("connect", format!("cannot start the client's runtime: {e}")))?;
        let (client, poll) =
            connect::connect(&runtime, o).map_err(|reason| fail("connect", reason))?;
        Ok(EtcdStore {
            inner: Arc::new(Inner {
                runtime,
                client,
                poll,
                prefix: o.prefix.clone(),
                endpoints,
                nonce: crate::Auth::random("").token_hex()[..16].to_string(),
                receipts: AtomicU64::new(0),
                requests: AtomicU64::new(0),
            }),
            timeout: Arc::new(Mutex::new(phalanx_core::DEFAULT_TIMEOUT)),
            lease: None,
            attempt: None,
        })
    }

    /// Another handle on the same connection whose calls wait at most `timeout` (a clone
    /// shares its timeout with the original).
    pub fn with_timeout(&self, timeout: Duration) -> EtcdStore {
        EtcdStore {
            inner: self.inner.clone(),
            timeout: Arc::new(Mutex::new(timeout)),
            lease: self.lease,
            attempt: self.attempt,
        }
    }

    /// Another handle on the same connection whose requests' attempts are bounded by
    /// `attempt` where their timeout would allow longer (Note [An attempt's bound]): for
    /// small requests that must not wait out an attempt a member will never answer.
    pub fn with_attempt_bound(&self, attempt: Duration) -> EtcdStore {
        EtcdStore {
            attempt: Some(attempt),
            ..self.clone()
        }
    }

    /// Grants a lease of `ttl` (whole seconds, at least 2: etcd refuses shorter ones than
    /// about one and a half election timeouts) and keeps it alive until it is dropped (Note
    /// [etcd leases]).
    pub fn grant_lease(&self, ttl: Duration) -> Result<EtcdLease> {
        let secs = ttl.as_secs().max(2);
        let mut client = self.inner.client.clone();
        let timeout = self.timeout();
        let granted = self.inner.runtime.block_on(async {
            tokio::time::timeout(timeout, client.lease_grant(secs as i64, None)).await
        });
        let id = match granted {
            Ok(Ok(r)) => r.id(),
            Ok(Err(e)) => return Err(self.fail("lease", e.to_string())),
            Err(_) => return Err(self.fail("lease", format!("no answer within {timeout:.0?}"))),
        };
        let ttl = Duration::from_secs(secs);
        let keeper =
            self.inner
                .runtime
                .spawn(lease::keep_alive(self.inner.client.clone(), id, ttl));
        Ok(EtcdLease::new(id, ttl, keeper))
    }

    /// Another handle whose writes attach their keys to `lease`: they are deleted when it
    /// expires (Note [etcd leases]). Its reads and its timeout are this handle's.
    pub fn with_lease(&self, lease: &EtcdLease) -> EtcdStore {
        EtcdStore {
            lease: Some(lease.id()),
            ..self.clone()
        }
    }

    /// How this handle's writes attach their keys: to its lease, if it has one.
    fn put_options(&self) -> Option<PutOptions> {
        self.lease.map(|id| PutOptions::new().with_lease(id))
    }

    /// How many requests this client (and its clones) sent, watches included.
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// The job's prefix (`/phalanx/<job>/`).
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The endpoints, as given.
    pub fn endpoints(&self) -> &str {
        &self.inner.endpoints
    }

    /// Removes every key of the job; returns how many there were.
    pub fn delete_prefix(&self) -> Result<i64> {
        let mut deleted = 0;
        for prefix in [self.inner.prefix.clone(), self.receipts_prefix()] {
            deleted += self.call("delete_prefix", |mut kv| {
                let prefix = prefix.clone();
                async move {
                    let r = kv
                        .delete(prefix, Some(DeleteOptions::new().with_prefix()))
                        .await?;
                    Ok(r.deleted())
                }
            })?;
        }
        Ok(deleted)
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.inner.prefix)
    }

    fn fail(&self, op: &'static str, mut reason: String) -> Error {
        if reason.contains("larger than max") || reason.contains("request is too large") {
            reason.push_str(
                " (a member takes requests up to its --max-request-bytes, 1.5 MiB unless set; \
                 etcd advises at most 10 MiB)",
            );
        }
        Error::Etcd {
            endpoints: self.inner.endpoints.clone(),
            op,
            reason,
        }
    }

    /// Runs one request on the store's runtime, bounded by the store's timeout; a request
    /// that may have landed is sent again (the operations that use this are idempotent).
    fn call<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T>
    where
        F: Fn(KvClient) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.request(true, f).map_err(|e| self.failure(op, e))
    }

    /// Runs one request, bounded by the store's timeout, and sends it again while it was
    /// surely not carried out ([`not_carried_out`]: a member gone, or no leader), or, with
    /// `again_if_unsure`, while it may or may not have been ([`unsure`]: the leader changed
    /// under it, the connection broke after sending).
    ///
    /// One member lost therefore costs a retry, not an error. A cluster without a quorum
    /// answers nothing, hence the timeout, which names the last refusal seen.
    fn request<T, F, Fut>(&self, again_if_unsure: bool, f: F) -> Result<T, Failure>
    where
        F: Fn(KvClient) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        // Note [An attempt's bound]
        // A member cut off by a partition refuses nothing: a request sent its way just gets no
        // answer. Bounding each attempt lets the next one go to another member (the channel
        // picks the least loaded of two, and the hung request loads that one), where one
        // attempt would wait out the whole timeout. A member that forwarded a write to a
        // leader that died holds it the same way, unanswered until its own request timeout
        // (5 s and two election timeouts), although a new leader answers the same write a
        // moment later: in the node-0 drills with etcd's leader on the lost host, the
        // survivors' agents claimed the departure only when such an attempt ran out, 1.25 s
        // after they sent it (their control handle's 5 s timeout over 4), whatever the
        // election's length. A handle whose requests are small and whose callers wait on
        // them (`with_attempt_bound`: the agents' control handle, the workers' store) bounds
        // its attempts tighter. A request cut short is sent again, as any attempt that got no
        // answer is: the idempotent ones as they are, a read-modify-write after reading its
        // receipt (Note [etcd receipts]); and each attempt cut short doubles the next one's
        // bound, up to the timeout's share, so that a member slower than the bound (a slow
        // disk, a loaded host, a far link) is still waited for rather than sent the same
        // request again and again.
        let share = (self.timeout() / 4).clamp(Duration::from_millis(250), Duration::from_secs(2));
        let first = self.attempt.map_or(share, |bound| share.min(bound));
        self.request_on(&self.inner.client, again_if_unsure, (first, share), f)
    }

    /// [`request`](Self::request) through `client`, each attempt bounded by the first of
    /// `bounds`, doubled after each attempt cut short up to the second (Note [An attempt's
    /// bound]).
    fn request_on<T, F, Fut>(
        &self,
        client: &Client,
        again_if_unsure: bool,
        (first, most): (Duration, Duration),
        f: F,
    ) -> Result<T, Failure>
    where
        F: Fn(KvClient) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let timeout = self.timeout();
        let last = Mutex::new(None::<String>);
        let attempts = async {
            let mut bound = first;
            loop {
                self.inner.requests.fetch_add(1, Ordering::Relaxed);
                let answer = match tokio::time::timeout(bound, f(client.kv_client())).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        let cut = bound;
                        bound = (bound * 2).min(most.max(first));
                        Err(etcd_client::Error::IoError(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("no answer from the member within {cut:?}"),
                        )))
                    }
                };
                match answer {
                    Err(e) if not_carried_out(&e) || (again_if_unsure && unsure(&e)) => {
                        *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                        tokio::time::sleep(Duration::from_millis(20)).await
                    }
                    Err(e) if unsure(&e) => return Err(Failure::Unsure(e)),
                    Err(e) => return Err(Failure::Refused(e)),
                    Ok(v) => return Ok(v),
                }
            }
        };
        let answer = self
            .inner
            .runtime
            .block_on(async { tokio::time::timeout(timeout, attempts).await });
        let last = last.into_inner().unwrap_or_else(|p| p.into_inner());
        answer.map_err(|_| Failure::Timeout { timeout, last })?
    }

    fn failure(&self, op: &'static str, f: Failure) -> Error {
        match f {
            Failure::Timeout { timeout, last } => {
                let seen = last.map(|l| format!("; last: {l}")).unwrap_or_default();
                self.fail(
                    op,
                    format!(
                        "no answer within {timeout:.0?} (has the cluster lost its quorum? a \
                         majority of its members must be up){seen}"
                    ),
                )
            }
            Failure::Unsure(e) | Failure::Refused(e) => self.fail(op, e.to_string()),
        }
    }

    /// Reads `key`: its value and `mod_revision`, or the revision the read saw it missing at.
    fn read(&self, op: &'static str, key: &str) -> Result<Read> {
        let key = self.key(key);
        self.call(op, |mut kv| {
            let key = key.clone();
            async move {
                let r = kv.get(key, None).await?;
                Ok(match r.kvs().first() {
                    Some(kv) => Read::Present(kv.value().to_vec(), kv.mod_revision()),
                    None => Read::Missing(r.header().map_or(0, |h| h.revision())),
                })
            }
        })
    }

    /// Writes `new(current)` over `key` if nobody wrote it since it was read; retried until
    /// it lands. Returns what was written.
    ///
    /// Note [etcd receipts]: a transaction whose answer was lost (the leader changed under it, the
    /// connection broke, an attempt cut short: Note [An attempt's bound]) may or may not have
    /// landed, and sending an `add` again could count twice. So each call writes a receipt key
    /// of its own, outside the job's keys, holding what it wrote, and every attempt of the call
    /// is guarded by the receipt's absence: at most one attempt lands, even one that lands
    /// after the call looked for it and sent another; when unsure, or when an attempt finds the
    /// receipt there, the receipt says what landed. A receipt is removed in the background
    /// once the call returns, and any left with the job's keys.
    fn read_modify_write(
        &self,
        op: &'static str,
        key: &str,
        mut new: impl FnMut(Option<&[u8]>) -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        let full = self.key(key);
        let mut current = self.read(op, key)?;
        // One receipt for the whole call: every attempt is guarded by its absence, so that at
        // most one of them lands, and it holds what that one wrote.
        let receipt = format!(
            "{}{}/{}",
            self.receipts_prefix(),
            self.inner.nonce,
            self.inner.receipts.fetch_add(1, Ordering::Relaxed)
        );
        for attempt in 0u32.. {
            let (value, guard) = match &current {
                Read::Present(v, rev) => (
                    new(Some(v))?,
                    Compare::mod_revision(full.clone(), CompareOp::Equal, *rev),
                ),
                Read::Missing(_) => (
                    new(None)?,
                    Compare::version(full.clone(), CompareOp::Equal, 0),
                ),
            };
            // On a conflict the transaction answers with the key as it is now, so that the
            // next attempt needs no read of its own, and with the receipt, present when an
            // earlier attempt that went unanswered landed after all.
            let txn = Txn::new()
                .when([
                    guard,
                    Compare::version(receipt.clone(), CompareOp::Equal, 0),
                ])
                .and_then([
                    TxnOp::put(full.clone(), value.clone(), self.put_options()),
                    TxnOp::put(receipt.clone(), value.clone(), None),
                ])
                .or_else([
                    TxnOp::get(full.clone(), None),
                    TxnOp::get(receipt.clone(), None),
                ]);
            let answer = self.request(false, |mut kv| {
                let txn = txn.clone();
                async move {
                    let r = kv.txn(txn).await?;
                    let mut gets = r.op_responses().into_iter().filter_map(|op| match op {
                        TxnOpResponse::Get(g) => Some(g),
                        _ => None,
                    });
                    let now = gets.next().map(|g| match g.kvs().first() {
                        Some(kv) => Read::Present(kv.value().to_vec(), kv.mod_revision()),
                        None => Read::Missing(g.header().map_or(0, |h| h.revision())),
                    });
                    let earlier = gets
                        .next()
                        .and_then(|g| g.kvs().first().map(|kv| kv.value().to_vec()));
                    Ok((r.succeeded(), now, earlier))
                }
            });
            let written = match answer {
                Ok((true, _, _)) => Some(value),
                Ok((false, _, Some(earlier))) => Some(earlier),
                Ok((false, now, None)) => {
                    current = match now {
                        Some(now) => now,
                        None => self.read(op, key)?,
                    };
                    None
                }
                Err(Failure::Unsure(_)) => {
                    let earlier = self.call(op, |mut kv| {
                        let receipt = receipt.clone();
                        async move {
                            let r = kv.get(receipt, None).await?;
                            Ok(r.kvs().first().map(|kv| kv.value().to_vec()))
                        }
                    })?;
                    if earlier.is_none() {
                        current = self.read(op, key)?;
                    }
                    earlier
                }
                Err(e) => return Err(self.failure(op, e)),
            };
            if let Some(written) = written {
                let mut kv = self.inner.client.kv_client();
                self.inner.runtime.spawn(async move {
                    let _ = kv.delete(receipt, None).await;
                });
                return Ok(written);
            }
            // Many clients on one key (every rank bumping a counter): spread the retries,
            // or each round of them lets one through and the rest collide again.
            let cap = 1u64 << attempt.min(6);
            std::thread::sleep(Duration::from_micros(rand_below(cap * 1000) + 100));
        }
        unreachable!("the loop returns")
    }

    /// Where the receipts of [`EtcdStore::read_modify_write`] live: beside the job's keys,
    /// so that `num_keys` does not count them.
    fn receipts_prefix(&self) -> String {
        format!("{}.receipts/", self.inner.prefix.trim_end_matches('/'))
    }

    /// `compare_set` of a key that holds an empty value, with `expected` empty: a value guard.
    fn compare_set_present(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let full = self.key(key);
        let txn = Txn::new()
            .when([Compare::value(
                full.clone(),
                CompareOp::Equal,
                expected.to_vec(),
            )])
            .and_then([TxnOp::put(full, desired.to_vec(), self.put_options())]);
        let set = self.call("compare_set", |mut kv| {
            let txn = txn.clone();
            async move { Ok(kv.txn(txn).await?.succeeded()) }
        })?;
        match set {
            true => Ok(desired.to_vec()),
            false => self.compare_set(key, expected, desired),
        }
    }

    /// Blocks until every key exists, at most `timeout`; returns their values.
    ///
    /// Note [Gathering many keys]: rank 0 of a large job waits for a key per rank. One read per
    /// key and a watch per missing one would cost it thousands of requests at 1,024 ranks; so
    /// the keys are read in transactions of [`MAX_TXN_OPS`], and the missing ones are awaited
    /// through one watch on their common prefix, from the revision after the reads, whose
    /// events carry the values. A broken watch (its member went away) reads the missing keys
    /// again and watches anew.
    fn wait_get(&self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let deadline = Instant::now() + timeout;
        let mut values: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
        loop {
            let missing: Vec<usize> = (0..keys.len()).filter(|&i| values[i].is_none()).collect();
            let subset: Vec<&str> = missing.iter().map(|&i| keys[i]).collect();
            let (read, revision) = self.read_many("wait", &subset)?;
            for (&i, v) in missing.iter().zip(read) {
                values[i] = v;
            }
            let mut waiting: std::collections::HashMap<String, usize> = (0..keys.len())
                .filter(|&i| values[i].is_none())
                .map(|i| (self.key(keys[i]), i))
                .collect();
            if waiting.is_empty() {
                return Ok(values.into_iter().map(Option::unwrap_or_default).collect());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let first = (0..keys.len()).find(|&i| values[i].is_none()).expect("one");
            let timed_out = || Error::Timeout {
                key: keys[first].to_string(),
                after: timeout,
            };
            if left.is_zero() {
                return Err(timed_out());
            }
            let (got, broken) = match self.watch_for_puts(&mut waiting, revision + 1, left)? {
                Watched::Done(got) => (got, false),
                Watched::Deadline => return Err(timed_out()),
                Watched::Broken(got) => (got, true),
            };
            for (i, v) in got {
                values[i] = Some(v);
            }
            // Done: the next turn's read finds nothing missing and returns. Broken: read the
            // rest again, after a pause for the member to come back or the client to fail over.
            if broken {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Reads `keys` in transactions of at most [`MAX_TXN_OPS`] gets: each one's value if
    /// present, and the lowest revision the reads were served at.
    fn read_many(&self, op: &'static str, keys: &[&str]) -> Result<(Vec<Option<Vec<u8>>>, i64)> {
        let mut values = Vec::with_capacity(keys.len());
        let mut revision = i64::MAX;
        for chunk in keys.chunks(MAX_TXN_OPS) {
            if let [key] = chunk {
                let (v, rev) = match self.read(op, key)? {
                    Read::Present(v, rev) => (Some(v), rev),
                    Read::Missing(rev) => (None, rev),
                };
                values.push(v);
                revision = revision.min(rev);
                continue;
            }
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|k| TxnOp::get(self.key(k), None))
                .collect();
            let txn = Txn::new().and_then(ops);
            let (got, rev) = self.call(op, |mut kv| {
                let txn = txn.clone();
                async move {
                    let r = kv.txn(txn).await?;
                    let rev = r.header().map_or(0, |h| h.revision());
                    let got: Vec<Option<Vec<u8>>> = r
                        .op_responses()
                        .into_iter()
                        .map(|op| match op {
                            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
                            _ => None,
                        })
                        .collect();
                    Ok((got, rev))
                }
            })?;
            values.extend(got);
            revision = revision.min(rev);
        }
        Ok((values, if revision == i64::MAX { 0 } else { revision }))
    }

    /// Watches the common prefix of the `waiting` keys (full key → index) from `revision`
    /// until a put came for each of them (removed from `waiting` as they come), the deadline
    /// `left` passed, or the watch broke (Note [Gathering many keys]).
    fn watch_for_puts(
        &self,
        waiting: &mut std::collections::HashMap<String, usize>,
        revision: i64,
        left: Duration,
    ) -> Result<Watched> {
        let prefix = common_prefix(waiting.keys().map(String::as_str));
        let exact = waiting.len() == 1;
        self.inner.requests.fetch_add(1, Ordering::Relaxed);
        let mut watch = self.inner.client.watch_client();
        let mut got = Vec::new();
        let ended = self.inner.runtime.block_on(async {
            tokio::time::timeout(left, async {
                let mut options = WatchOptions::new().with_start_revision(revision);
                if !exact {
                    options = options.with_prefix();
                }
                let mut stream = watch.watch(prefix, Some(options)).await?;
                while let Some(r) = stream.message().await? {
                    if r.canceled() {
                        return Err(etcd_client::Error::WatchError(format!(
                            "the watch was cancelled: {}",
                            r.cancel_reason()
                        )));
                    }
                    for e in r.events() {
                        let Some(kv) = e.kv() else { continue };
                        if e.event_type() != EventType::Put {
                            continue;
                        }
                        let key = String::from_utf8_lossy(kv.key()).into_owned();
                        if let Some(i) = waiting.remove(&key) {
                            got.push((i, kv.value().to_vec()));
                        }
                    }
                    if waiting.is_empty() {
                        return Ok(());
                    }
                }
                Err(etcd_client::Error::WatchError(
                    "the watch stream ended".into(),
                ))
            })
            .await
        });
        Ok(match ended {
            Ok(Ok(())) => Watched::Done(got),
            Err(_) if waiting.is_empty() => Watched::Done(got),
            Err(_) => Watched::Deadline,
            // The member serving the watch went away: read again (through another member; a
            // read that cannot be served says why) and watch anew.
            Ok(Err(_)) => Watched::Broken(got),
        })
    }
}

/// What a watch for puts came back with: the (index, value) of the puts it saw.
enum Watched {
    Done(Vec<(usize, Vec<u8>)>),
    Deadline,
    Broken(Vec<(usize, Vec<u8>)>),
}

/// The longest common prefix of `keys` (whole characters).
fn common_prefix<'a>(mut keys: impl Iterator<Item = &'a str>) -> String {
    let Some(first) = keys.next() else {
        return String::new();
    };
    let mut len = first.len();
    for k in keys {
        len = first
            .char_indices()
            .zip(k.chars())
            .take_while(|((_, a), b)| a == b)
            .last()
            .map_or(0, |((i, a), _)| i + a.len_utf8())
            .min(len);
    }
    first[..len].to_string()
}

enum Read {
    Present(Vec<u8>, i64),
    Missing(i64),
}

/// A number below `n` (`n` > 0), from the system's random source; retries need no more.
fn rand_below(n: u64) -> u64 {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    u64::from_le_bytes(b) % n.max(1)
}

impl Store for EtcdStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let (key, value) = (self.key(key), value.to_vec());
        let options = self.put_options();
        self.call("set", |mut kv| {
            let (key, value, options) = (key.clone(), value.clone(), options.clone());
            async move { kv.put(key, value, options).await.map(drop) }
        })
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        Ok(self
            .wait_get(&[key], self.timeout())?
            .pop()
            .expect("one key"))
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        // What landed may be an earlier attempt's sum (Note [etcd receipts]).
        let written = self.read_modify_write("add", key, |current| {
            Ok(crate::table::added(key, current, delta)?
                .to_string()
                .into_bytes())
        })?;
        crate::table::added(key, Some(&written), 0)
    }
    /// A serializable read through a client that does not ask for a leader (Note [A poll
    /// reads serializably] in `etcd/poll.rs`).
    fn peek(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let full = self.key(key);
        // A poll's attempt is bounded tighter (POLL_ATTEMPT): one sent to a member that is
        // gone is sent again elsewhere.
        self.request_on(
            self.inner.poll.client(),
            true,
            (POLL_ATTEMPT, POLL_ATTEMPT),
            |kv| PollClient::read(kv, full.clone()),
        )
        .map_err(|e| self.failure("peek", e))
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let full = self.key(key);
        // Missing and `expected` empty: set; missing otherwise: PyTorch's "lie" (return
        // `expected`, set nothing); present and equal: set; present and other: its value.
        let guard = match expected.is_empty() {
            true => Compare::version(full.clone(), CompareOp::Equal, 0),
            false => Compare::value(full.clone(), CompareOp::Equal, expected.to_vec()),
        };
        let txn = Txn::new()
            .when([guard])
            .and_then([TxnOp::put(
                full.clone(),
                desired.to_vec(),
                self.put_options(),
            )])
            .or_else([TxnOp::get(full, None)]);
        let (set, current) = self.call("compare_set", |mut kv| {
            let txn = txn.clone();
            async move {
                let r = kv.txn(txn).await?;
                let current = r.op_responses().into_iter().find_map(|op| match op {
                    TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
                    _ => None,
                });
                Ok((r.succeeded(), current))
            }
        })?;
        Ok(match (set, current) {
            (true, _) => desired.to_vec(),
            // Present with an empty value and `expected` empty: equal, so set (version ≠ 0
            // made the guard fail).
            (false, Some(c)) if c.is_empty() && expected.is_empty() => {
                return self.compare_set_present(key, expected, desired)
            }
            (false, Some(c)) => c,
            (false, None) => expected.to_vec(),
        })
    }
    fn wait_timeout(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        self.wait_get(keys, timeout).map(drop)
    }
    fn check(&self, keys: &[&str]) -> Result<bool> {
        let (values, _) = self.read_many("check", keys)?;
        Ok(values.iter().all(Option::is_some))
    }
    fn delete_key(&self, key: &str) -> Result<bool> {
        let key = self.key(key);
        self.call("delete_key", |mut kv| {
            let key = key.clone();
            async move { Ok(kv.delete(key, None).await?.deleted() > 0) }
        })
    }
    fn num_keys(&self) -> Result<i64> {
        let prefix = self.inner.prefix.clone();
        self.call("num_keys", |mut kv| {
            let prefix = prefix.clone();
            async move {
                let options = GetOptions::new().with_prefix().with_count_only();
                Ok(kv.get(prefix, Some(options)).await?.count())
            }
        })
    }
    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        self.read_modify_write("append", key, |current| {
            let mut v = current.map(<[u8]>::to_vec).unwrap_or_default();
            v.extend_from_slice(value);
            Ok(v)
        })
        .map(drop)
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        self.wait_get(keys, self.timeout())
    }
    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        let pairs = crate::prefix_store::zip_pairs(keys, values)?;
        for chunk in pairs.chunks(MAX_TXN_OPS) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|(k, v)| TxnOp::put(self.key(k), v.to_vec(), self.put_options()))
                .collect();
            let txn = Txn::new().and_then(ops);
            self.call("multi_set", |mut kv| {
                let txn = txn.clone();
                async move { kv.txn(txn).await.map(drop) }
            })?;
        }
        Ok(())
    }
    fn timeout(&self) -> Duration {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn set_timeout(&self, t: Duration) {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }
}
