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
    /// Adds `delta` to the int64 held as decimal ASCII in `key` (missing = 0); returns the new value.
    fn add(&self, key: &str, delta: i64) -> Result<i64>;
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

macro_rules! forward_store {
    ($($ty:ty),*) => {$(
        impl<S: Store + ?Sized> Store for $ty {
            fn set(&self, key: &str, value: &[u8]) -> Result<()> { (**self).set(key, value) }
            fn get(&self, key: &str) -> Result<Vec<u8>> { (**self).get(key) }
            fn add(&self, key: &str, delta: i64) -> Result<i64> { (**self).add(key, delta) }
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
