//! `PrefixStore`: a namespaced view of another store (restart rounds, subgroups).

use std::time::Duration;

use crate::{Claim, Error, Result, Store};

/// A view of `inner` in which every key `k` becomes `"{prefix}/k"` (PyTorch's PrefixStore).
///
/// ```
/// use phalanx_store::{HashStore, PrefixStore, Store};
/// let base = HashStore::new();
/// let round1 = PrefixStore::new("round1", base.clone());
/// round1.set("addr", b"10.0.0.1").unwrap();
/// assert_eq!(base.get("round1/addr").unwrap(), b"10.0.0.1");
/// ```
#[derive(Debug, Clone)]
pub struct PrefixStore<S: Store> {
    prefix: String,
    inner: S,
}

impl<S: Store> PrefixStore<S> {
    /// A view of `inner` under `prefix`.
    pub fn new(prefix: impl Into<String>, inner: S) -> Self {
        PrefixStore {
            prefix: prefix.into(),
            inner,
        }
    }

    /// The prefix (without the `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn key(&self, key: &str) -> String {
        format!("{}/{}", self.prefix, key)
    }

    fn keys(&self, keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| self.key(k)).collect()
    }

    /// Strips the prefix from a timeout's key, so errors name the key the caller used.
    fn unprefix(&self, e: Error) -> Error {
        match e {
            Error::Timeout { key, after } => {
                let stripped = key
                    .strip_prefix(&self.prefix)
                    .and_then(|k| k.strip_prefix('/'))
                    .map(str::to_string);
                Error::Timeout {
                    key: stripped.unwrap_or(key),
                    after,
                }
            }
            other => other,
        }
    }
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Pairs `keys` with `values`, refusing lists of different lengths.
pub(crate) fn zip_pairs<'a>(
    keys: &[&'a str],
    values: &[&'a [u8]],
) -> Result<Vec<(&'a str, &'a [u8])>> {
    if keys.len() != values.len() {
        return Err(Error::Invalid {
            reason: format!(
                "multi_set got {} keys but {} values",
                keys.len(),
                values.len()
            ),
        });
    }
    Ok(keys.iter().copied().zip(values.iter().copied()).collect())
}

impl<S: Store> Store for PrefixStore<S> {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set(&self.key(key), value)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.inner.get(&self.key(key)).map_err(|e| self.unprefix(e))
    }
    fn get_timeout(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.inner
            .get_timeout(&self.key(key), timeout)
            .map_err(|e| self.unprefix(e))
    }
    fn set_then_get(&self, key: &str, value: &[u8], then: &str, t: Duration) -> Result<Vec<u8>> {
        self.inner
            .set_then_get(&self.key(key), value, &self.key(then), t)
            .map_err(|e| self.unprefix(e))
    }
    fn claim_then_get(&self, key: &str, value: &[u8], then: &str, t: Duration) -> Result<Claim> {
        self.inner
            .claim_then_get(&self.key(key), value, &self.key(then), t)
            .map_err(|e| self.unprefix(e))
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.inner.add(&self.key(key), delta)
    }
    fn peek(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.peek(&self.key(key))
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        self.inner.compare_set(&self.key(key), expected, desired)
    }
    fn wait_timeout(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let k = self.keys(keys);
        self.inner
            .wait_timeout(&refs(&k), timeout)
            .map_err(|e| self.unprefix(e))
    }
    fn check(&self, keys: &[&str]) -> Result<bool> {
        self.inner.check(&refs(&self.keys(keys)))
    }
    fn delete_key(&self, key: &str) -> Result<bool> {
        self.inner.delete_key(&self.key(key))
    }
    /// Counts every key of the inner store, as PyTorch's PrefixStore does.
    fn num_keys(&self) -> Result<i64> {
        self.inner.num_keys()
    }
    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.append(&self.key(key), value)
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        let k = self.keys(keys);
        self.inner
            .multi_get(&refs(&k))
            .map_err(|e| self.unprefix(e))
    }
    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        zip_pairs(keys, values)?;
        self.inner.multi_set(&refs(&self.keys(keys)), values)
    }
    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }
    fn set_timeout(&self, t: Duration) {
        self.inner.set_timeout(t)
    }
}
