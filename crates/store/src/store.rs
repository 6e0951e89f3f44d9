//! The `Store` trait: PyTorch TCPStore's operations, shared by the TCP client, the in-memory
//! store and prefixed views.

use std::sync::Arc;
use std::time::Duration;

use crate::Result;

/// A rendezvous key-value store with PyTorch TCPStore semantics (see `docs/store.md`).
///
/// Blocking calls (`get`, `wait`, `multi_get`) wait at most [`Store::timeout`] and then fail with
/// [`crate::Error::Timeout`] naming the missing key.
pub trait Store: Send + Sync {
    /// Sets `key` to `value` (overwriting) and wakes its waiters.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    /// The value of `key`, blocking until it exists or the store timeout passes.
    fn get(&self, key: &str) -> Result<Vec<u8>>;
    /// The value of `key`, blocking until it exists or `timeout` passes. One request where the
    /// store's protocol allows (phalanx's does); a wait and a get elsewhere.
    fn get_timeout(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.wait_timeout(&[key], timeout)?;
        self.get(key)
    }
    /// Adds `delta` to the int64 held as decimal ASCII in `key` (missing = 0); returns the new value.
    fn add(&self, key: &str, delta: i64) -> Result<i64>;
    /// The value of `key` now, `None` when it is missing, without waiting and without
    /// writing: for a poll that runs every step, or a look that must not hold anyone up. A
    /// store with replicas may answer from the replica its client talks to, a moment behind
    /// the newest write (etcd: a serializable read, answered even while the cluster elects a
    /// leader: Note [A poll reads serializably] in `etcd/poll.rs`). By default a `check`,
    /// then a `get`.
    fn peek(&self, key: &str) -> Result<Option<Vec<u8>>> {
        match self.check(&[key])? {
            true => self.get(key).map(Some),
            false => Ok(None),
        }
    }
    /// Sets `key` to `value`, then waits up to `timeout` for `then` and returns its value: one
    /// round trip where the store's protocol allows (Note [Two requests in one round trip] in
    /// `tcp_store.rs`), a set and a get elsewhere.
    fn set_then_get(
        &self,
        key: &str,
        value: &[u8],
        then: &str,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        self.set(key, value)?;
        self.get_timeout(then, timeout)
    }
    /// Claims `key` for `value` (`compare_set(key, "", value)`: the first writer keeps it),
    /// then, if this call holds it, waits up to `timeout` for `then`: [`Claim::Held`] with
    /// `then`'s value, or [`Claim::Taken`] with the value another writer left in `key` (nothing
    /// is awaited then). One round trip where the protocol allows, as [`Store::set_then_get`].
    fn claim_then_get(
        &self,
        key: &str,
        value: &[u8],
        then: &str,
        timeout: Duration,
    ) -> Result<Claim> {
        let got = self.compare_set(key, b"", value)?;
        if got != value {
            return Ok(Claim::Taken(got));
        }
        Ok(Claim::Held(self.get_timeout(then, timeout)?))
    }
    /// TCPStore's compare-and-set; returns the value after the operation, except that a
    /// missing key with a non-empty `expected` returns `expected` unchanged (PyTorch's behaviour).
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>>;
    /// Blocks until every key exists, up to the store timeout.
    fn wait(&self, keys: &[&str]) -> Result<()> {
        self.wait_timeout(keys, self.timeout())
    }
    /// Blocks until every key exists, up to `timeout`.
    fn wait_timeout(&self, keys: &[&str], timeout: Duration) -> Result<()>;
    /// Whether every key exists, without blocking.
    fn check(&self, keys: &[&str]) -> Result<bool>;
    /// Deletes `key`; whether it existed.
    fn delete_key(&self, key: &str) -> Result<bool>;
    /// Number of keys in the store.
    fn num_keys(&self) -> Result<i64>;
    /// Appends `value` to `key` (missing = empty) and wakes its waiters.
    fn append(&self, key: &str, value: &[u8]) -> Result<()>;
    /// The values of `keys`, blocking until all exist or the store timeout passes.
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>>;
    /// Sets every `keys[i]` to `values[i]` at once.
    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()>;
    /// The timeout of blocking calls.
    fn timeout(&self) -> Duration;
    /// Changes the timeout of blocking calls.
    fn set_timeout(&self, t: Duration);
}

/// What [`Store::claim_then_get`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This call holds the key; the awaited key's value.
    Held(Vec<u8>),
    /// Another writer holds the key; its value.
    Taken(Vec<u8>),
}

macro_rules! forward_store {
    ($($ty:ty),*) => {$(
        impl<S: Store + ?Sized> Store for $ty {
            fn set(&self, key: &str, value: &[u8]) -> Result<()> { (**self).set(key, value) }
            fn get(&self, key: &str) -> Result<Vec<u8>> { (**self).get(key) }
            fn get_timeout(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
                (**self).get_timeout(key, timeout)
            }
            fn set_then_get(&self, key: &str, value: &[u8], then: &str, timeout: Duration)
                -> Result<Vec<u8>> {
                (**self).set_then_get(key, value, then, timeout)
            }
            fn claim_then_get(&self, key: &str, value: &[u8], then: &str, timeout: Duration)
                -> Result<Claim> {
                (**self).claim_then_get(key, value, then, timeout)
            }
            fn add(&self, key: &str, delta: i64) -> Result<i64> { (**self).add(key, delta) }
            fn peek(&self, key: &str) -> Result<Option<Vec<u8>>> { (**self).peek(key) }
            fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
                (**self).compare_set(key, expected, desired)
            }
            fn wait(&self, keys: &[&str]) -> Result<()> { (**self).wait(keys) }
            fn wait_timeout(&self, keys: &[&str], timeout: Duration) -> Result<()> {
                (**self).wait_timeout(keys, timeout)
            }
            fn check(&self, keys: &[&str]) -> Result<bool> { (**self).check(keys) }
            fn delete_key(&self, key: &str) -> Result<bool> { (**self).delete_key(key) }
            fn num_keys(&self) -> Result<i64> { (**self).num_keys() }
            fn append(&self, key: &str, value: &[u8]) -> Result<()> { (**self).append(key, value) }
            fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> { (**self).multi_get(keys) }
            fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
                (**self).multi_set(keys, values)
            }
            fn timeout(&self) -> Duration { (**self).timeout() }
            fn set_timeout(&self, t: Duration) { (**self).set_timeout(t) }
        }
    )*};
}

// So that `PrefixStore<Arc<dyn Store>>` and `Box<dyn Store>` work wherever a `Store` is wanted.
forward_store!(Arc<S>, Box<S>, &S);
