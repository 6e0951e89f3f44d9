//! `HashStore`: the in-memory store for thread-level tests (Gloo's `HashStore`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::table::{Table, WaitError};
use crate::{Error, Result, Store};

/// An in-memory [`Store`] shared by threads: clones see the same keys. Same semantics as the
/// TCP store (both run on the same table code); blocking calls sleep on a condvar.
///
/// ```
/// use phalanx_store::{HashStore, Store};
/// let store = HashStore::new();
/// let peer = store.clone();
/// let t = std::thread::spawn(move || peer.get("ready").unwrap());
/// store.set("ready", b"yes").unwrap();
/// assert_eq!(t.join().unwrap(), b"yes");
/// assert_eq!(store.add("count", 2).unwrap(), 2);
/// ```
#[derive(Clone)]
pub struct HashStore {
    table: Arc<Table>,
    timeout: Arc<Mutex<Duration>>,
}

impl Default for HashStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for HashStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashStore")
            .field("num_keys", &self.table.num_keys())
            .finish()
    }
}

impl HashStore {
    /// An empty store with the default timeout (`phalanx_core::DEFAULT_TIMEOUT`).
    pub fn new() -> Self {
        Self::with_timeout(phalanx_core::DEFAULT_TIMEOUT)
    }

    /// An empty store whose blocking calls wait at most `timeout`.
    pub fn with_timeout(timeout: Duration) -> Self {
        HashStore {
            table: Arc::new(Table::default()),
            timeout: Arc::new(Mutex::new(timeout)),
        }
    }

    /// A handle on an existing table (a server's keys, for the process hosting it).
    pub(crate) fn from_table(table: Arc<Table>) -> Self {
        HashStore {
            table,
            timeout: Arc::new(Mutex::new(phalanx_core::DEFAULT_TIMEOUT)),
        }
    }

    fn wait_get(&self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        self.table
            .wait_get(keys, timeout, None, &mut || false)
            .map_err(|e| match e {
                WaitError::Timeout(key) => Error::Timeout {
                    key,
                    after: timeout,
                },
                WaitError::Cancelled => unreachable!("HashStore waits are never cancelled"),
            })
    }
}

impl Store for HashStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.table.set(key, value);
        Ok(())
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        Ok(self
            .wait_get(&[key], self.timeout())?
            .pop()
            .expect("one key"))
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.table.add(key, delta)
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        Ok(self.table.compare_set(key, expected, desired))
    }
    fn wait_timeout(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        self.wait_get(keys, timeout).map(drop)
    }
    fn check(&self, keys: &[&str]) -> Result<bool> {
        Ok(self.table.check(keys))
    }
    fn delete_key(&self, key: &str) -> Result<bool> {
        Ok(self.table.delete(key))
    }
    fn num_keys(&self) -> Result<i64> {
        Ok(self.table.num_keys())
    }
    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        self.table.append(key, value)
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        self.wait_get(keys, self.timeout())
    }
    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        let pairs = crate::prefix_store::zip_pairs(keys, values)?;
        self.table.multi_set(&pairs);
        Ok(())
    }
    fn timeout(&self) -> Duration {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn set_timeout(&self, t: Duration) {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }
}
